package abi

import (
	"math"
	"unsafe"

	"github.com/electcore/electcore/core"
)

// DecodeInput decodes the msgp Input b into in, as CheckBatch followed by
// UnmarshalMsg into a zero Input would, reusing in's slices. It is what the
// wasm module runs on every step.
//
// The common batch — a time, maybe a wall clock, and bus messages, laid out
// as the hosts' encoders write it — takes a single pass over b: no CheckBatch
// walk, no msgp reader calls, no allocation: topics and payloads alias b,
// which must therefore not change while in is used, and whose strings no
// one may keep after that (core.Engine.Step keeps no topic or payload
// memory past its return). In wasm a function call costs several times
// what it does natively, so the generated decoder spent more on calls than on bytes
// (host/BENCHMARKS.md). Anything else — joins, commands, unknown keys,
// duplicate keys, nil, encodings no msgp encoder emits for these fields —
// falls back to CheckBatch and the generated decoder on a fresh Input, whose
// result the fast path must equal (FuzzDecodeInput).
func DecodeInput(b []byte, in *core.Input) error {
	if decodeCommon(b, in) {
		return nil
	}
	if err := CheckBatch(b); err != nil {
		return err
	}
	// A fresh Input: the generated decoder, reusing elements, would leave a
	// previous batch's field in an element whose key this batch omits.
	*in = core.Input{}
	_, err := (*input)(in).UnmarshalMsg(b)
	return err
}

// decodeCommon decodes b into in if it is laid out as every encoder here
// (msgp's, @msgpack/msgpack's) writes such a batch: a fixmap of now, wall,
// in, backlog, and join and cmd if empty (each at most once, fixstr keys), in being a fixarray or array16 of
// {"t": fixstr or str8, "p": bin8 or bin16} maps in that order, and nothing
// after it. It returns false, with in in any state, for anything else. It
// reads bytes directly instead of calling small readers: in wasm each call
// costs more than the bytes it reads.
func decodeCommon(b []byte, in *core.Input) bool {
	if len(b) == 0 || b[0]&0xf0 != 0x80 {
		return false
	}
	n, i := int(b[0]&0x0f), 1
	now, wall := int64(0), int64(0)
	backlog := false
	var seen uint8
	msgs := in.Inbound[:0]
	for ; n > 0; n-- {
		if i >= len(b) || b[i]&0xe0 != 0xa0 {
			return false
		}
		kl := int(b[i] & 0x1f)
		if len(b)-i-1 < kl {
			return false
		}
		key := b[i+1 : i+1+kl]
		i += 1 + kl
		var bit uint8
		var ok bool
		switch string(key) {
		case "now":
			bit = 1
			if now, ok = int64At(b, &i); !ok {
				return false
			}
		case "wall":
			bit = 2
			if wall, ok = int64At(b, &i); !ok {
				return false
			}
		case "in":
			bit = 4
			if i >= len(b) {
				return false
			}
			var cnt int
			switch c := b[i]; {
			case c&0xf0 == 0x90:
				cnt, i = int(c&0x0f), i+1
			case c == 0xdc && len(b)-i > 2:
				cnt, i = int(b[i+1])<<8|int(b[i+2]), i+3
			default:
				return false
			}
			// Every element takes at least a byte: a larger count is a
			// truncated batch, for the full decoder to refuse.
			if cnt > len(b)-i {
				return false
			}
			if cap(msgs) < cnt {
				msgs = make([]core.Message, 0, cnt)
			}
			msgs = msgs[:0]
			for k := 0; k < cnt; k++ {
				var m core.Message
				if i, ok = decodeMessage(b, i, &m); !ok {
					return false
				}
				msgs = append(msgs, m)
			}
		case "backlog": // a host with more received messages waiting
			bit = 32
			if i >= len(b) || b[i]&0xfe != 0xc2 {
				return false
			}
			backlog = b[i] == 0xc3
			i++
		case "join", "cmd": // empty lists, as some encoders write them
			bit = 8
			if key[0] == 'c' {
				bit = 16
			}
			if i >= len(b) || b[i] != 0x90 {
				return false
			}
			i++
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	if i != len(b) {
		return false
	}
	// clearomitted: keys left out are zero.
	*in = core.Input{Now: now, Wall: wall, Join: in.Join[:0], Inbound: msgs, Commands: in.Commands[:0], Backlog: backlog}
	return true
}

// decodeMessage decodes the {"t": fixstr|str8, "p": bin8|bin16} map at i
// into m and returns the index after it. The topic aliases b like the
// payload: a string of its own was the module's one allocation per message
// (two thirds of its allocations in a settled swarm, and their collection;
// host/BENCHMARKS.md).
func decodeMessage(b []byte, i int, m *core.Message) (int, bool) {
	if len(b)-i < 4 || b[i] != 0x82 || b[i+1] != 0xa1 || b[i+2] != 't' {
		return i, false
	}
	i += 3
	var n int
	switch c := b[i]; {
	case c&0xe0 == 0xa0:
		n, i = int(c&0x1f), i+1
	case c == 0xd9 && len(b)-i > 1:
		n, i = int(b[i+1]), i+2
	default:
		return i, false
	}
	if len(b)-i < n+3 || b[i+n] != 0xa1 || b[i+n+1] != 'p' {
		return i, false
	}
	topic := b[i : i+n]
	i += n + 2
	switch c := b[i]; {
	case c == 0xc4 && len(b)-i > 1:
		n, i = int(b[i+1]), i+2
	case c == 0xc5 && len(b)-i > 2:
		n, i = int(b[i+1])<<8|int(b[i+2]), i+3
	default:
		return i, false
	}
	if len(b)-i < n {
		return i, false
	}
	m.Topic = unsafe.String(unsafe.SliceData(topic), len(topic))
	m.Payload = b[i : i+n : i+n]
	return i + n, true
}

// int64At reads any msgpack integer that fits an int64 (as msgp's
// ReadInt64Bytes accepts).
func int64At(b []byte, i *int) (int64, bool) {
	if *i >= len(b) {
		return 0, false
	}
	c := b[*i]
	if c <= 0x7f || c >= 0xe0 { // positive and negative fixint
		*i++
		return int64(int8(c)), true
	}
	var w int
	switch c {
	case 0xcc, 0xd0:
		w = 1
	case 0xcd, 0xd1:
		w = 2
	case 0xce, 0xd2:
		w = 4
	case 0xcf, 0xd3:
		w = 8
	default:
		return 0, false
	}
	if len(b)-*i-1 < w {
		return 0, false
	}
	var u uint64
	for _, x := range b[*i+1 : *i+1+w] {
		u = u<<8 | uint64(x)
	}
	*i += 1 + w
	if c >= 0xd0 { // signed: sign-extend from w bytes
		shift := uint(64 - 8*w)
		return int64(u<<shift) >> shift, true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}
