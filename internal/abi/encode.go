package abi

import "github.com/electcore/electcore/core"

// EncodeOutput appends the msgp encoding of o to b: exactly the bytes
// o.MarshalMsg appends (FuzzEncodeOutput). It is what the wasm module runs
// after every step.
//
// Publishes and the wake time — nearly every Output — are written byte by
// byte into room reserved once, instead of through msgp's Msgsize pass and
// small appenders: in wasm each of those is a function call, and so is every
// append of a constant (a memmove), which cost more than the bytes they
// write (host/BENCHMARKS.md). Persisted states and events, rarer, go through
// the generated encoders.
func EncodeOutput(b []byte, o *core.Output) ([]byte, error) {
	// The map header; "pub" and its array header; "wake" and an int64; per
	// message its map header and "t", a str header and the topic, "p", a bin
	// header and the payload.
	need := 1 + 4 + 5 + 5 + 9
	for k := range o.Publishes {
		need += 3 + 5 + len(o.Publishes[k].Topic) + 2 + 5 + len(o.Publishes[k].Payload)
	}
	if cap(b)-len(b) < need { // slices.Grow, inline: its call cost 0.5 % of a wasm step
		nb := make([]byte, len(b), 2*cap(b)+need)
		copy(nb, b)
		b = nb
	}
	fields := byte(0)
	if len(o.Persist) > 0 {
		fields++
	}
	if len(o.Publishes) > 0 {
		fields++
	}
	if len(o.Events) > 0 {
		fields++
	}
	if o.WakeAt != 0 {
		fields++
	}
	b = append(b, 0x80|fields)
	var err error
	if len(o.Persist) > 0 {
		b = append(b, "\xa7persist"...)
		b = appendArrayHeader(b, len(o.Persist))
		for k := range o.Persist {
			if b, err = (*groupState)(&o.Persist[k]).MarshalMsg(b); err != nil {
				return b, err
			}
		}
	}
	if len(o.Publishes) > 0 {
		b = append(b, 0xa3)
		b = append(b, 'p')
		b = append(b, 'u')
		b = append(b, 'b')
		if n := len(o.Publishes); n <= 15 {
			b = append(b, 0x90|byte(n))
		} else {
			b = appendArrayHeader(b, n)
		}
		for k := range o.Publishes {
			m := &o.Publishes[k]
			b = append(b, 0x82)
			b = append(b, 0xa1)
			b = append(b, 't')
			if n := len(m.Topic); n <= 31 {
				b = append(b, 0xa0|byte(n))
			} else {
				b = appendSized(b, n, 0xd9, 0xda, 0xdb)
			}
			b = append(b, m.Topic...)
			b = append(b, 0xa1)
			b = append(b, 'p')
			if n := len(m.Payload); n <= 0xff {
				b = append(b, 0xc4)
				b = append(b, byte(n))
			} else {
				b = appendSized(b, n, 0xc4, 0xc5, 0xc6)
			}
			b = append(b, m.Payload...)
		}
	}
	if len(o.Events) > 0 {
		b = append(b, "\xa2ev"...)
		b = appendArrayHeader(b, len(o.Events))
		for k := range o.Events {
			if b, err = (*event)(&o.Events[k]).MarshalMsg(b); err != nil {
				return b, err
			}
		}
	}
	if o.WakeAt != 0 {
		b = append(b, 0xa4)
		b = append(b, 'w')
		b = append(b, 'a')
		b = append(b, 'k')
		b = append(b, 'e')
		b = appendInt64(b, o.WakeAt)
	}
	return b, nil
}

// appendSized appends a msgpack length header for n: code8 and one byte
// (if code8 is not 0 and n fits), code16 and two bytes, or code32 and four.
// Out of line, like appendInt64: in wasm every inlined append is another
// growth path, and these are rare or once per Output.
//
//go:noinline
func appendSized(b []byte, n int, code8, code16, code32 byte) []byte {
	switch {
	case code8 != 0 && n <= 0xff:
		return append(b, code8, byte(n))
	case n <= 0xffff:
		return append(b, code16, byte(n>>8), byte(n))
	}
	return append(b, code32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// appendArrayHeader is msgp's AppendArrayHeader.
//
//go:noinline
func appendArrayHeader(b []byte, n int) []byte {
	if n <= 15 {
		return append(b, 0x90|byte(n))
	}
	return appendSized(b, n, 0, 0xdc, 0xdd)
}

// appendInt64 is msgp's AppendInt64: the smallest signed encoding of v.
//
//go:noinline
func appendInt64(b []byte, v int64) []byte {
	switch {
	case v >= -32 && v <= 0x7f:
		return append(b, byte(v))
	case v >= -0x80 && v < 0:
		return append(b, 0xd0, byte(v))
	case v >= -0x8000 && v <= 0x7fff:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= -0x80000000 && v <= 0x7fffffff:
		return append(b, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, 0xd3, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
