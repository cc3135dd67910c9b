package abi

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/electcore/electcore/core"

	"github.com/tinylib/msgp/msgp"
)

func encodeOutputCases() []core.Output {
	hb := []byte(`{"type":"ack","leader":"a","term":1,"from":"b","group":"g","seq":1}`)
	var outs []core.Output
	for _, wake := range []int64{0, 1, 127, 128, 255, 256, 32767, 32768, 1<<31 - 1, 1 << 31, 1 << 40, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, math.MinInt64} {
		outs = append(outs, core.Output{WakeAt: wake})
	}
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		outs = append(outs,
			core.Output{Publishes: []core.Message{{Topic: strings.Repeat("t", n), Payload: hb}}, WakeAt: 5},
			core.Output{Publishes: []core.Message{{Topic: "g", Payload: make([]byte, n)}}},
		)
	}
	many := make([]core.Message, 16)
	for k := range many {
		many[k] = core.Message{Topic: core.Topic("g"), Payload: hb}
	}
	outs = append(outs,
		core.Output{Publishes: many[:15]},
		core.Output{Publishes: many},
		core.Output{Publishes: []core.Message{{Topic: "g", Payload: nil}}},
		core.Output{
			Persist:   []core.GroupState{{Group: "g", Term: 3, Vote: "a"}},
			Publishes: []core.Message{{Topic: core.Topic("g"), Payload: hb}},
			Events:    []core.Event{{Kind: core.EventBecameLeader, Group: "g", Term: 3, Leader: "b"}},
			WakeAt:    1 << 33,
		},
		core.Output{Events: []core.Event{{Kind: core.EventLeaderChanged, Group: "g"}, {Kind: core.EventLease, Group: "g"}}},
	)
	return outs
}

// TestEncodeOutput: EncodeOutput appends what the generated MarshalMsg does,
// in every size class of msgpack's headers and integers, after any prefix.
func TestEncodeOutput(t *testing.T) {
	for _, o := range encodeOutputCases() {
		want, err := msgpOutput([]byte("prefix"), &o)
		if err != nil {
			t.Fatal(err)
		}
		for _, buf := range [][]byte{nil, []byte("prefix"), append(make([]byte, 0, 1<<17), "prefix"...)} {
			if len(buf) == 0 {
				buf = append(buf, "prefix"...)
			}
			got, err := EncodeOutput(buf, &o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%+v:\n got % x\nwant % x", o, got[:min(len(got), 64)], want[:min(len(want), 64)])
			}
		}
	}
}

// TestEncodeOutputNoAlloc: with room in the buffer (the module's steady
// state), encoding a step's Output allocates nothing.
func TestEncodeOutputNoAlloc(t *testing.T) {
	o := encodeOutputCases()[len(encodeOutputCases())-2]
	buf := make([]byte, 0, 4096)
	if allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = EncodeOutput(buf[:0], &o); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per encode, want 0", allocs)
	}
}

// FuzzEncodeOutput: for any Output msgp can decode, EncodeOutput gives the
// bytes of the generated encoder.
func FuzzEncodeOutput(f *testing.F) {
	for _, o := range encodeOutputCases()[:30] {
		b, err := msgpOutput(nil, &o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Skip first: it refuses counts the bytes cannot hold, on which the
		// generated decoder would allocate first.
		if _, err := msgp.Skip(b); err != nil {
			return
		}
		var o core.Output
		if _, err := UnmarshalOutput(b, &o); err != nil {
			return
		}
		want, err1 := msgpOutput(nil, &o)
		got, err2 := EncodeOutput(nil, &o)
		if (err1 == nil) != (err2 == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%+v: EncodeOutput % x (%v), MarshalMsg % x (%v)", o, got, err2, want, err1)
		}
	})
}

// msgpOutput is what the generated encoder writes for o, its empty lists
// left out as Marshal does for an Input: the reference for EncodeOutput.
func msgpOutput(b []byte, o *core.Output) ([]byte, error) {
	c := *o
	c.Persist, c.Publishes, c.Events = emptyAsNil(c.Persist), emptyAsNil(c.Publishes), emptyAsNil(c.Events)
	return (*output)(&c).MarshalMsg(b)
}
