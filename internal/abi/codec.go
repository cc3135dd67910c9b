package abi

import "github.com/electcore/electcore/core"

// One function per type and direction, not a generic Marshal: a type switch
// would link every type's codec into the module, which uses a few.

// MarshalInput appends the msgpack encoding of in to b. An empty list is
// left out, nil or not, so a batch's bytes never depend on whether a host
// reuses its buffers, and an idle batch is a few bytes.
func MarshalInput(b []byte, in *core.Input) ([]byte, error) {
	c := *in
	c.Join, c.Inbound, c.Commands = emptyAsNil(c.Join), emptyAsNil(c.Inbound), emptyAsNil(c.Commands)
	return (*input)(&c).MarshalMsg(b)
}

// UnmarshalInput decodes the Input at the start of b into in and returns
// the bytes after it, reusing in's lists; a key b leaves out is zero in in.
// A batch from outside goes through DecodeInput, which checks it first.
func UnmarshalInput(b []byte, in *core.Input) ([]byte, error) {
	return (*input)(in).UnmarshalMsg(b)
}

// UnmarshalOutput decodes the Output at the start of b (EncodeOutput's
// bytes) into o and returns the bytes after it; a key b leaves out is zero
// in o.
func UnmarshalOutput(b []byte, o *core.Output) ([]byte, error) {
	return (*output)(o).UnmarshalMsg(b)
}

// MarshalState appends the msgpack encoding of st to b: the persisted state
// format (testdata/golden/state-*.msgp).
func MarshalState(b []byte, st *core.GroupState) ([]byte, error) {
	return (*groupState)(st).MarshalMsg(b)
}

// UnmarshalState decodes the GroupState at the start of b into st and
// returns the bytes after it; older states (fewer keys) decode too.
func UnmarshalState(b []byte, st *core.GroupState) ([]byte, error) {
	return (*groupState)(st).UnmarshalMsg(b)
}

// MarshalConfig appends the msgpack encoding of c to b.
func MarshalConfig(b []byte, c *core.Config) ([]byte, error) {
	return (*config)(c).MarshalMsg(b)
}

// UnmarshalConfig decodes the Config at the start of b into c and returns
// the bytes after it.
func UnmarshalConfig(b []byte, c *core.Config) ([]byte, error) {
	return (*config)(c).UnmarshalMsg(b)
}

// MarshalStatus appends the msgpack encoding of st to b.
func MarshalStatus(b []byte, st *core.Status) ([]byte, error) {
	return (*status)(st).MarshalMsg(b)
}

// UnmarshalStatus decodes the Status at the start of b into st and returns
// the bytes after it.
func UnmarshalStatus(b []byte, st *core.Status) ([]byte, error) {
	return (*status)(st).UnmarshalMsg(b)
}

// SpecSize is an upper bound of the size of spec's encoding.
func SpecSize(spec *core.GroupSpec) int {
	return (*groupSpec)(spec).Msgsize()
}

// emptyAsNil returns nil for an empty list: msgp's omitempty leaves out
// only a nil one.
func emptyAsNil[E any](l []E) []E {
	if len(l) == 0 {
		return nil
	}
	return l
}
