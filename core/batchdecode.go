package core

import "math"

// DecodeInput decodes the msgp Input b into in, as CheckBatch followed by
// UnmarshalMsg into a zero Input would, reusing in's slices. It is what the
// wasm module runs on every step.
//
// The common batch — a time, maybe a wall clock, and bus messages — takes a
// single pass over b with no other call: no CheckBatch walk, no msgp reader
// calls, no allocation (a topic equal to the one decoded at the same index
// last time is reused, and payloads alias b, which must therefore not change
// while in is used). In wasm a function call costs several times what it
// does natively, so the generated decoder spent more on calls than on bytes
// (host/BENCHMARKS.md). Anything else — joins, commands, unknown keys,
// duplicate keys, nil, encodings no msgp encoder emits for these fields —
// falls back to CheckBatch and the generated decoder on a fresh Input, whose
// result the fast path must equal (FuzzDecodeInput).
func DecodeInput(b []byte, in *Input) error {
	if decodeCommon(b, in) {
		return nil
	}
	if err := CheckBatch(b); err != nil {
		return err
	}
	// A fresh Input: the generated decoder, reusing elements, would leave a
	// previous batch's field in an element whose key this batch omits.
	*in = Input{}
	_, err := in.UnmarshalMsg(b)
	return err
}

// decodeCommon decodes b into in if it is a map of now, wall and in (each at
// most once), in being an array of {t: str, p: bin} maps, and nothing after
// it. It returns false, with in in any state, for anything else.
func decodeCommon(b []byte, in *Input) bool {
	i := 0
	n, ok := mapLen(b, &i)
	if !ok {
		return false
	}
	now, wall := int64(0), int64(0)
	var seen uint8
	msgs := in.Inbound[:0]
	for ; n > 0; n-- {
		// Keys: "now", "wall", "in" as fixstr.
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
			cnt, ok := arrayLen(b, &i)
			// Every element takes at least a byte: a larger count is a
			// truncated batch, for the full decoder to refuse.
			if !ok || cnt > len(b)-i {
				return false
			}
			if cap(msgs) < cnt {
				msgs = make(Messages, 0, cnt)
			}
			prev := msgs[:cnt]
			msgs = msgs[:0]
			for k := 0; k < cnt; k++ {
				var m Message
				if !decodeMessage(b, &i, &m, prev[k].Topic) {
					return false
				}
				msgs = append(msgs, m)
			}
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
	*in = Input{Now: now, Wall: wall, Join: in.Join[:0], Inbound: msgs, Commands: in.Commands[:0]}
	return true
}

// decodeMessage decodes a {t, p} map (each key exactly once); the topic
// reuses last when equal.
func decodeMessage(b []byte, i *int, m *Message, last string) bool {
	n, ok := mapLen(b, i)
	if !ok || n != 2 {
		return false
	}
	var seen uint8
	for ; n > 0; n-- {
		if *i+2 > len(b) || b[*i] != 0xa1 {
			return false
		}
		key := b[*i+1]
		*i += 2
		switch key {
		case 't':
			s, ok := strAt(b, i)
			if !ok || seen&1 != 0 {
				return false
			}
			seen |= 1
			if string(s) == last {
				m.Topic = last
			} else {
				m.Topic = string(s)
			}
		case 'p':
			p, ok := binAt(b, i)
			if !ok || seen&2 != 0 {
				return false
			}
			seen |= 2
			m.Payload = p
		default:
			return false
		}
	}
	return true
}

// The readers below advance *i past one msgpack value of their kind, or
// return false (unsupported prefix or truncated).

func mapLen(b []byte, i *int) (int, bool) {
	if *i >= len(b) {
		return 0, false
	}
	c := b[*i]
	switch {
	case c&0xf0 == 0x80:
		*i++
		return int(c & 0x0f), true
	case c == 0xde:
		return lenAt(b, i, 2)
	}
	return 0, false
}

func arrayLen(b []byte, i *int) (int, bool) {
	if *i >= len(b) {
		return 0, false
	}
	c := b[*i]
	switch {
	case c&0xf0 == 0x90:
		*i++
		return int(c & 0x0f), true
	case c == 0xdc:
		return lenAt(b, i, 2)
	case c == 0xdd:
		return lenAt(b, i, 4)
	}
	return 0, false
}

// lenAt reads the w-byte big-endian length after the prefix at *i.
func lenAt(b []byte, i *int, w int) (int, bool) {
	if len(b)-*i-1 < w {
		return 0, false
	}
	n := 0
	for _, x := range b[*i+1 : *i+1+w] {
		n = n<<8 | int(x)
	}
	*i += 1 + w
	return n, true
}

// bytesAt returns the n bytes at *i, advancing past them.
func bytesAt(b []byte, i *int, n int) ([]byte, bool) {
	if n > len(b)-*i {
		return nil, false
	}
	s := b[*i : *i+n : *i+n]
	*i += n
	return s, true
}

func strAt(b []byte, i *int) ([]byte, bool) {
	if *i >= len(b) {
		return nil, false
	}
	c := b[*i]
	var n int
	ok := true
	switch {
	case c&0xe0 == 0xa0:
		*i++
		n = int(c & 0x1f)
	case c == 0xd9:
		n, ok = lenAt(b, i, 1)
	case c == 0xda:
		n, ok = lenAt(b, i, 2)
	case c == 0xdb:
		n, ok = lenAt(b, i, 4)
	default:
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return bytesAt(b, i, n)
}

func binAt(b []byte, i *int) ([]byte, bool) {
	if *i >= len(b) {
		return nil, false
	}
	var n int
	ok := true
	switch b[*i] {
	case 0xc4:
		n, ok = lenAt(b, i, 1)
	case 0xc5:
		n, ok = lenAt(b, i, 2)
	case 0xc6:
		n, ok = lenAt(b, i, 4)
	default:
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return bytesAt(b, i, n)
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
