// Package abi is the codec between hosts and the election core: the
// MessagePack encoding of core's batches (core.Input, core.Output), group
// configurations, persisted states (core.GroupState, the format a host
// stores) and statuses, as the wasm module and the hosts exchange them
// (wasm/ABI.md). It holds the module's fast paths (DecodeInput,
// EncodeOutput), the nesting check every decoder runs first (CheckBatch),
// and the committed golden encodings that pin the bytes.
package abi
