package abi

import (
	"errors"
	"strconv"

	"github.com/electcore/electcore/core"
)

// MaxBatchDepth bounds the nesting of a msgp batch, which CheckBatch checks
// iteratively before any recursive decoder sees it. The deepest real path
// is Input → join → GroupSpec → Config → member_keys → key (5).
const MaxBatchDepth = 12

// CheckBatch reports whether b can be handed to a msgp decoder: at most
// MaxBatchBytes, and no array or map nested deeper than MaxBatchDepth. It
// walks the encoding iteratively, so a hostile batch (say a megabyte of
// nested one-element arrays under an unknown key, which the generated
// decoders would skip recursively) is refused in time linear in its size and
// constant stack. It does not check that b is an Input; the decoder does.
func CheckBatch(b []byte) error {
	if len(b) > core.MaxBatchBytes {
		return errors.New("batch of " + strconv.Itoa(len(b)) + " bytes exceeds " + strconv.Itoa(core.MaxBatchBytes))
	}
	// The walk reads msgpack prefixes directly (msgp's NextType, Read*Header
	// and Skip cost 5× more, twice per wasm step: host and module both check).
	var stack [MaxBatchDepth + 1]uint64 // elements left at each open level
	stack[0] = 1
	depth, i := 0, 0
	for depth >= 0 {
		if stack[depth] == 0 {
			depth--
			continue
		}
		stack[depth]--
		if i >= len(b) {
			return errBatchTruncated
		}
		c := b[i]
		size, children, container := uint64(1), uint64(0), false
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		case c <= 0x8f: // fixmap
			children, container = 2*uint64(c&0x0f), true
		case c <= 0x9f: // fixarray
			children, container = uint64(c&0x0f), true
		case c <= 0xbf: // fixstr
			size += uint64(c & 0x1f)
		default:
			if c < 0xc4 { // 0xc1: never used
				return errors.New("batch: invalid msgpack prefix 0x" + strconv.FormatUint(uint64(c), 16) + " at byte " + strconv.Itoa(i))
			}
			h := msgpHeaders[c-0xc4]
			size += uint64(h.lenBytes) + uint64(h.fixed)
			if h.lenBytes > 0 {
				if len(b)-i-1 < int(h.lenBytes) {
					return errBatchTruncated
				}
				var n uint64
				for _, x := range b[i+1 : i+1+int(h.lenBytes)] {
					n = n<<8 | uint64(x)
				}
				switch h.kind {
				case 'm':
					children, container = 2*n, true
				case 'a':
					children, container = n, true
				default:
					size += n
				}
			}
		}
		if uint64(len(b)-i) < size {
			return errBatchTruncated
		}
		i += int(size)
		if container {
			if depth++; depth > MaxBatchDepth {
				return errors.New("batch nested deeper than " + strconv.Itoa(MaxBatchDepth))
			}
			stack[depth] = children
		}
	}
	return nil
}

var errBatchTruncated = errors.New("batch truncated")

// msgpHeader describes the msgpack prefixes 0xc4–0xdf: how many big-endian
// length bytes follow, how many fixed bytes (ext type, scalar payload) come
// after them, and whether the length counts map pairs ('m') or array
// elements ('a') rather than bytes.
type msgpHeader struct {
	lenBytes, fixed uint8
	kind            byte
}

var msgpHeaders = [0xe0 - 0xc4]msgpHeader{
	0xc4 - 0xc4: {1, 0, 0}, 0xc5 - 0xc4: {2, 0, 0}, 0xc6 - 0xc4: {4, 0, 0}, // bin 8/16/32
	0xc7 - 0xc4: {1, 1, 0}, 0xc8 - 0xc4: {2, 1, 0}, 0xc9 - 0xc4: {4, 1, 0}, // ext 8/16/32
	0xca - 0xc4: {0, 4, 0}, 0xcb - 0xc4: {0, 8, 0}, // float 32/64
	0xcc - 0xc4: {0, 1, 0}, 0xcd - 0xc4: {0, 2, 0}, 0xce - 0xc4: {0, 4, 0}, 0xcf - 0xc4: {0, 8, 0}, // uint
	0xd0 - 0xc4: {0, 1, 0}, 0xd1 - 0xc4: {0, 2, 0}, 0xd2 - 0xc4: {0, 4, 0}, 0xd3 - 0xc4: {0, 8, 0}, // int
	0xd4 - 0xc4: {0, 2, 0}, 0xd5 - 0xc4: {0, 3, 0}, 0xd6 - 0xc4: {0, 5, 0}, 0xd7 - 0xc4: {0, 9, 0}, 0xd8 - 0xc4: {0, 17, 0}, // fixext
	0xd9 - 0xc4: {1, 0, 0}, 0xda - 0xc4: {2, 0, 0}, 0xdb - 0xc4: {4, 0, 0}, // str 8/16/32
	0xdc - 0xc4: {2, 0, 'a'}, 0xdd - 0xc4: {4, 0, 'a'}, // array 16/32
	0xde - 0xc4: {2, 0, 'm'}, 0xdf - 0xc4: {4, 0, 'm'}, // map 16/32
}
