package core

import (
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// Nesting limits. parseWire enforces MaxWireDepth as it scans; CheckBatch
// checks a msgp batch iteratively before any recursive decoder sees it.
const (
	// MaxWireDepth bounds the nesting of a JSON wire payload. Every protocol
	// message is one flat object (depth 1); a little room is left for
	// extensions that other agents may add.
	MaxWireDepth = 8
	// MaxBatchDepth bounds the nesting of a msgp batch. The deepest real
	// path is Input → join → GroupSpec → Config → member_keys → key (5).
	MaxBatchDepth = 12
)

// CheckBatch reports whether b can be handed to a msgp decoder: at most
// MaxBatchBytes, and no array or map nested deeper than MaxBatchDepth. It
// walks the encoding iteratively, so a hostile batch (say a megabyte of
// nested one-element arrays under an unknown key, which the generated
// decoders would skip recursively) is refused in time linear in its size and
// constant stack. It does not check that b is an Input; the decoder does.
func CheckBatch(b []byte) error {
	if len(b) > MaxBatchBytes {
		return fmt.Errorf("batch of %d bytes exceeds %d", len(b), MaxBatchBytes)
	}
	var stack [MaxBatchDepth + 1]uint64 // elements left at each open level
	stack[0] = 1
	depth := 0
	for depth >= 0 {
		if stack[depth] == 0 {
			depth--
			continue
		}
		stack[depth]--
		if len(b) == 0 {
			return fmt.Errorf("batch truncated")
		}
		var n uint32
		var err error
		switch msgp.NextType(b) {
		case msgp.MapType:
			n, b, err = msgp.ReadMapHeaderBytes(b)
			if err == nil {
				depth++
				if depth > MaxBatchDepth {
					return fmt.Errorf("batch nested deeper than %d", MaxBatchDepth)
				}
				stack[depth] = 2 * uint64(n)
			}
		case msgp.ArrayType:
			n, b, err = msgp.ReadArrayHeaderBytes(b)
			if err == nil {
				depth++
				if depth > MaxBatchDepth {
					return fmt.Errorf("batch nested deeper than %d", MaxBatchDepth)
				}
				stack[depth] = uint64(n)
			}
		default:
			b, err = msgp.Skip(b) // a scalar, string, binary or extension: no recursion
		}
		if err != nil {
			return fmt.Errorf("batch: %v", err)
		}
	}
	return nil
}
