//go:build wasip1

package main

import (
	"unsafe" // also for go:linkname

	"github.com/electcore/electcore/core"
)

// The raw ABI. See ABI.md.

// ec_input returns the address of the module-owned input buffer, grown to
// hold at least size bytes, or 0 if size exceeds core.MaxBatchBytes. The
// address stays valid until the next ec_input call that grows it.
//
//go:wasmexport ec_input
func ecInput(size uint32) uint32 {
	if size > core.MaxBatchBytes {
		return 0
	}
	if cap(inBuf) < int(size) || inBuf == nil {
		inBuf = make([]byte, max(int(size), 4096, 2*cap(inBuf)))
	}
	inBuf = inBuf[:cap(inBuf)]
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(inBuf))))
}

// input returns the first n bytes of the input buffer, or nil if n is out of
// range.
func input(n uint32) ([]byte, bool) {
	if int(n) > len(inBuf) {
		return nil, false
	}
	return inBuf[:n], true
}

// ec_step decodes a msgp core.Input of n bytes from the input buffer, steps
// the engine and returns ptr<<32|len of the msgp core.Output, or a negative
// error code (message from ec_error).
//
//go:wasmexport ec_step
func ecStep(n uint32) int64 {
	err := guard(func() error {
		b, ok := input(n)
		if !ok {
			return fail(errTooLarge, "ec_step("+utoa(n)+"): input buffer holds "+itoa(len(inBuf))+" bytes (call ec_input first)")
		}
		return stepBytes(b)
	})
	if err != nil {
		return setError(err)
	}
	return pack(outBuf)
}

// ec_join is ec_step restricted to one GroupSpec: it fails (errRejected) if
// the core refuses the group, changing nothing.
//
//go:wasmexport ec_join
func ecJoin(n uint32) int64 {
	err := guard(func() error {
		b, ok := input(n)
		if !ok {
			return fail(errTooLarge, "ec_join("+utoa(n)+"): input buffer holds "+itoa(len(inBuf))+" bytes")
		}
		return joinBytes(b)
	})
	if err != nil {
		return setError(err)
	}
	return pack(outBuf)
}

// ec_status reads a group name of n bytes from the input buffer and returns
// ptr<<32|len of its msgp core.Status, or a negative error code (-3: not
// joined).
//
//go:wasmexport ec_status
func ecStatus(n uint32) int64 {
	err := guard(func() error {
		b, ok := input(n)
		if !ok {
			return fail(errTooLarge, "ec_status("+utoa(n)+"): input buffer holds "+itoa(len(inBuf))+" bytes")
		}
		return statusBytes(string(b))
	})
	if err != nil {
		return setError(err)
	}
	return pack(outBuf)
}

// ec_error returns ptr<<32|len of the last error message (0 if none yet).
//
//go:wasmexport ec_error
func ecError() int64 { return pack(errBuf) }

// ec_reset drops every group: the instance behaves as freshly instantiated
// (cheaper than a new instance; linear memory does not shrink).
//
//go:wasmexport ec_reset
func ecReset() int32 {
	if err := guard(func() error { resetEngine(); return nil }); err != nil {
		return int32(setError(err))
	}
	return 0
}

// ec_memory_limit sets the soft limit of the module's collector to limit
// bytes, as GOMEMLIMIT does at start (a negative limit changes nothing),
// and returns the limit before. A host raises it with the bound it puts on
// the instance's linear memory, which grows with the groups joined: the
// collector works harder as the heap nears the soft limit, so one set for
// fewer groups would make it collect without pause.
//
//go:wasmexport ec_memory_limit
func ecMemoryLimit(limit int64) int64 { return setMemoryLimit(limit) }

// setMemoryLimit is runtime/debug.SetMemoryLimit, which the runtime
// provides under this name: runtime/debug itself imports fmt (~280 KB of
// the module).
//
//go:linkname setMemoryLimit runtime/debug.setMemoryLimit
func setMemoryLimit(limit int64) int64

// ec_abi_version lets a host check it speaks this ABI.
//
//go:wasmexport ec_abi_version
func ecABIVersion() int32 { return abiVersion }

const abiVersion = 1
