package abi

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/tinylib/msgp/msgp"
)

// checkBatchRef is CheckBatch as first written, on msgp's own readers: the
// reference for the hand-written walk.
func checkBatchRef(b []byte) error {
	if len(b) > core.MaxBatchBytes {
		return fmt.Errorf("batch of %d bytes exceeds %d", len(b), core.MaxBatchBytes)
	}
	var stack [MaxBatchDepth + 1]uint64
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
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return fmt.Errorf("batch: %v", err)
		}
	}
	return nil
}

// TestCheckBatchMatchesReference: CheckBatch accepts exactly what the msgp
// based reference accepts, over the FuzzInput corpus, real batches, their
// truncations and random mutations, and every one- and two-byte input.
func TestCheckBatchMatchesReference(t *testing.T) {
	var cases [][]byte
	files, _ := filepath.Glob("testdata/fuzz/FuzzInput/*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if lit, ok := strings.CutPrefix(line, "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
				if err != nil {
					t.Fatal(err)
				}
				cases = append(cases, []byte(s))
			}
		}
	}
	c := ed25519Config("a", "b")
	real := []core.Input{
		{},
		{Now: 1 << 40, Wall: -5, Join: []core.GroupSpec{{Config: c, State: core.GroupState{Group: "g", Term: 3, Vote: "b"}}},
			Inbound:  []core.Message{{Topic: "t", Payload: make([]byte, 70000)}, {Topic: strings.Repeat("x", 40), Payload: []byte("{}")}},
			Commands: []core.Command{{Kind: core.CmdCampaign, Group: "g"}, {Kind: core.CmdTransfer, Group: "g", Target: "b"}}},
	}
	for _, in := range real {
		enc, err := MarshalInput(nil, &in)
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(enc) + 1 {
			if n < 300 || n%97 == 0 || n > len(enc)-300 {
				cases = append(cases, enc[:n])
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		p := append([]byte(nil), cases[r.IntN(len(cases))]...)
		for range 1 + r.IntN(4) {
			if len(p) > 0 {
				p[r.IntN(len(p))] = byte(r.Uint32())
			}
		}
		cases = append(cases, p)
	}
	for x := range 1 << 16 {
		cases = append(cases, []byte{byte(x)}, []byte{byte(x), byte(x >> 8)})
	}
	for _, b := range cases {
		got, want := CheckBatch(b), checkBatchRef(b)
		if (got == nil) != (want == nil) {
			t.Fatalf("% x: CheckBatch %v, reference %v", b[:min(len(b), 64)], got, want)
		}
	}
}

func BenchmarkCheckBatch(b *testing.B) {
	enc, _ := MarshalInput(nil, &core.Input{Now: 3, Inbound: []core.Message{{Topic: "election:g", Payload: []byte(`{"type":"heartbeat","leader":"a","term":1,"from":"a","group":"g","seq":1}`)}}})
	b.Run("impl=walk", func(b *testing.B) {
		for b.Loop() {
			_ = CheckBatch(enc)
		}
	})
	b.Run("impl=msgp", func(b *testing.B) {
		for b.Loop() {
			_ = checkBatchRef(enc)
		}
	})
}

// TestCheckBatchLimits: a megabyte of nesting is refused as nested, a batch
// over MaxBatchBytes as too large, real batches pass, truncated ones fail.
func TestCheckBatchLimits(t *testing.T) {
	// A batch with a megabyte of nested arrays under an unknown key.
	b := []byte{0x82, 0xa3, 'n', 'o', 'w', 0x01, 0xa1, 'x'}
	b = append(b, bytes.Repeat([]byte{0x91}, core.MaxBatchBytes-len(b)-1)...)
	b = append(b, 0xc0)
	if err := CheckBatch(b); err == nil || !strings.Contains(err.Error(), "nested") {
		t.Fatalf("deep batch: %v", err)
	}
	if err := CheckBatch(append(b, 0)); err == nil {
		t.Fatal("oversized batch accepted")
	}
	// Real batches pass.
	c := ed25519Config("a", "b")
	in := core.Input{Now: 1, Join: []core.GroupSpec{{Config: c}}, Inbound: []core.Message{{Topic: "t", Payload: []byte("x")}}, Commands: []core.Command{{Kind: core.CmdCampaign, Group: "g"}}}
	enc, err := MarshalInput(nil, &in)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckBatch(enc); err != nil {
		t.Fatalf("real batch: %v", err)
	}
	if err := CheckBatch(enc[:len(enc)-3]); err == nil {
		t.Fatal("truncated batch accepted")
	}
}

// ed25519Config is the config of member ids[0] of group "g" with ed25519
// keys (stand-ins of the right sizes): the most deeply nested one a batch
// carries.
func ed25519Config(ids ...string) core.Config {
	c := core.Config{ID: ids[0], Group: "g", Members: ids, Auth: core.AuthEd25519,
		Key: bytes.Repeat([]byte{ids[0][0]}, 64), MemberKeys: map[string][]byte{}}
	for _, id := range ids {
		c.MemberKeys[id] = key32(id[0])
	}
	return c
}
