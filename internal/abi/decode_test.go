package abi

import (
	"bytes"
	"testing"

	"github.com/electcore/electcore/core"
)

// decodeReference is what DecodeInput must equal: CheckBatch, then the
// generated decoder on a zero Input.
func decodeReference(b []byte) (core.Input, error) {
	var in core.Input
	if err := CheckBatch(b); err != nil {
		return in, err
	}
	_, err := UnmarshalInput(b, &in)
	return in, err
}

func decodeInputSeeds(tb testing.TB) [][]byte {
	hb := []byte(`{"type":"heartbeat","leader":"a","term":1,"from":"a","group":"g","seq":1}`)
	inputs := []core.Input{
		{},
		{Now: 3, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}}},
		{Now: -1, Wall: 1 << 40, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}, {Topic: core.Topic("h"), Payload: nil}}},
		{Now: 1, Join: []core.GroupSpec{{Config: core.Config{ID: "b", Group: "g", Members: []string{"a", "b"}}}}},
		{Now: 7, Commands: []core.Command{{Kind: core.CmdResign, Group: "g"}}},
		{Now: 1 << 62, Inbound: []core.Message{{Topic: string(make([]byte, 300)), Payload: make([]byte, 70000)}}},
		{Now: 4, Inbound: []core.Message{{Topic: "stalE", Payload: hb}, {Topic: "stale", Payload: hb}}}, // as long as the reused topic
		{Now: 5, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}}, Backlog: true},
	}
	var seeds [][]byte
	for _, in := range inputs {
		b, err := MarshalInput(nil, &in)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	seeds = append(seeds,
		[]byte{0x81, 0xa3, 'n', 'o', 'w', 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0},                                 // now: uint64 beyond int64
		[]byte{0x81, 0xa3, 'n', 'o', 'w', 0xd1, 0xff, 0x85},                                                // now: int16 −123
		[]byte{0x82, 0xa3, 'n', 'o', 'w', 0x01, 0xa3, 'n', 'o', 'w', 0x02},                                 // duplicate key
		[]byte{0x81, 0xa2, 'i', 'n', 0x91, 0x81, 0xa1, 't', 0xa1, 'x'},                                     // message without p
		[]byte{0x81, 0xa2, 'i', 'n', 0x91, 0x82, 0xa1, 't', 0xc4, 0x01, 'x', 0xa1, 'p', 0xc4, 0},           // topic as bin
		[]byte{0x81, 0xa2, 'i', 'n', 0xdd, 0xff, 0xff, 0xff, 0xff},                                         // huge count, truncated
		[]byte{0x81, 0xa3, 'n', 'o', 'w', 0x01, 0x00},                                                      // trailing byte
		[]byte{0x81, 0xa1, 'x', 0x91, 0x91, 0x91, 0xc0},                                                    // unknown key
		[]byte{0x83, 0xa3, 'n', 'o', 'w', 0x05, 0xa4, 'j', 'o', 'i', 'n', 0x90, 0xa3, 'c', 'm', 'd', 0x90}, // empty join and cmd
		[]byte{0x82, 0xa3, 'c', 'm', 'd', 0x90, 0xa3, 'c', 'm', 'd', 0x90},                                 // repeated empty cmd
		[]byte{0x81, 0xa2, 'i', 'n', 0x91, 0x82, 0xa1, 'p', 0xc4, 0x00, 0xa1, 't', 0xa1, 'x'},              // p before t
	)
	return seeds
}

// FuzzDecodeInput: DecodeInput accepts exactly what the reference does and
// yields the same Input (compared by its encoding), whatever a reused Input
// held before.
func FuzzDecodeInput(f *testing.F) {
	for _, s := range decodeInputSeeds(f) {
		f.Add(s)
	}
	var reused core.Input
	// A previous batch in the reused Input: a message at index 0 that a
	// batch omitting "t" or "p" must not inherit.
	prev, _ := MarshalInput(nil, &core.Input{Now: 9, Wall: 9, Inbound: []core.Message{{Topic: "stale", Payload: []byte("stale")}}, Commands: []core.Command{{Kind: core.CmdLeave, Group: "stale"}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := DecodeInput(prev, &reused); err != nil {
			t.Fatal(err)
		}
		want, wantErr := decodeReference(b)
		gotErr := DecodeInput(b, &reused)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("% x: DecodeInput error %v, reference %v", b, gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		we, err1 := MarshalInput(nil, &want)
		ge, err2 := MarshalInput(nil, &reused)
		if err1 != nil || err2 != nil || !bytes.Equal(we, ge) {
			t.Fatalf("% x: DecodeInput gave %+v, reference %+v", b, reused, want)
		}
	})
}

// TestDecodeInputCommonPath: the batches the hosts send every tick take the
// fast path, allocate nothing in steady state, and give the reference Input.
func TestDecodeInputCommonPath(t *testing.T) {
	hb := []byte(`{"type":"heartbeat","leader":"a","term":1,"from":"a","group":"g","seq":1}`)
	for _, in := range []core.Input{
		{Now: 3},
		{Now: 3, Wall: 1_700_000_000_000, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}}},
		{Now: 1 << 40, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}, {Topic: core.Topic("h"), Payload: make([]byte, 300)}}},
		// A host with more waiting: the overloaded case, fast too.
		{Now: 5, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}}, Backlog: true},
	} {
		b, err := MarshalInput(nil, &in)
		if err != nil {
			t.Fatal(err)
		}
		var got core.Input
		if !decodeCommon(b, &got) {
			t.Fatalf("%+v: not decoded by the fast path", in)
		}
		want, err := decodeReference(b)
		if err != nil {
			t.Fatal(err)
		}
		ge, _ := MarshalInput(nil, &got)
		we, _ := MarshalInput(nil, &want)
		if !bytes.Equal(ge, we) || got.Backlog != in.Backlog {
			t.Fatalf("fast path %+v, reference %+v", got, want)
		}
		if allocs := testing.AllocsPerRun(100, func() {
			if err := DecodeInput(b, &got); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Fatalf("%+v: %v allocations per decode, want 0", in, allocs)
		}
	}
}

// TestDecodeInputNodeLayout: a batch as the Node example's encodeInput
// writes it (empty join and cmd lists, keys in its order) takes the fast path.
func TestDecodeInputNodeLayout(t *testing.T) {
	hb := []byte(`{"type":"heartbeat"}`)
	b := []byte{0x85, 0xa3, 'n', 'o', 'w', 0x07, 0xa4, 'w', 'a', 'l', 'l', 0x00, 0xa4, 'j', 'o', 'i', 'n', 0x90,
		0xa2, 'i', 'n', 0x91, 0x82, 0xa1, 't', 0xaa}
	b = append(b, "election:g"...)
	b = append(b, 0xa1, 'p', 0xc4, byte(len(hb)))
	b = append(b, hb...)
	b = append(b, 0xa3, 'c', 'm', 'd', 0x90)
	var got core.Input
	if !decodeCommon(b, &got) {
		t.Fatal("not decoded by the fast path")
	}
	want, err := decodeReference(b)
	if err != nil {
		t.Fatal(err)
	}
	ge, _ := MarshalInput(nil, &got)
	we, _ := MarshalInput(nil, &want)
	if !bytes.Equal(ge, we) || got.Now != 7 || len(got.Inbound) != 1 || got.Inbound[0].Topic != "election:g" {
		t.Fatalf("fast path %+v, reference %+v", got, want)
	}
}

// TestDecodeInputTopicsAliasBatch: the fast path's topics are read in place,
// like its payloads: batches whose topics change from one step to the next
// (a settled swarm's) allocate nothing either, and each topic is its own
// batch's.
func TestDecodeInputTopicsAliasBatch(t *testing.T) {
	var encs [][]byte
	topicsOf := [][]string{{"election:g", "election:h"}, {"election:g", "election:g"}, {"election:x", "election:h"}, {"election:g"}, {"election:y", "election:z"}}
	for _, topics := range topicsOf {
		var batch core.Input
		for _, tp := range topics {
			batch.Inbound = append(batch.Inbound, core.Message{Topic: tp, Payload: []byte("{}")})
		}
		b, _ := MarshalInput(nil, &batch)
		encs = append(encs, b)
	}
	var in core.Input
	for j, b := range encs {
		if err := DecodeInput(b, &in); err != nil {
			t.Fatal(err)
		}
		if len(in.Inbound) != len(topicsOf[j]) {
			t.Fatalf("%d messages, want %d", len(in.Inbound), len(topicsOf[j]))
		}
		for k, tp := range topicsOf[j] {
			if in.Inbound[k].Topic != tp {
				t.Fatalf("batch %d, message %d: topic %q, want %q", j, k, in.Inbound[k].Topic, tp)
			}
		}
	}
	j := 0
	if allocs := testing.AllocsPerRun(100, func() {
		if err := DecodeInput(encs[j%len(encs)], &in); err != nil {
			t.Fatal(err)
		}
		j++
	}); allocs != 0 {
		t.Fatalf("%v allocations per decode, want 0", allocs)
	}
}

// BenchmarkDecodeInput: the heartbeat batch through DecodeInput and through
// CheckBatch + the generated decoder (what the module ran before).
func BenchmarkDecodeInput(b *testing.B) {
	hb := []byte(`{"type":"heartbeat","leader":"a","term":1,"from":"a","group":"g","seq":1}`)
	enc, _ := MarshalInput(nil, &core.Input{Now: 3, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}}})
	b.Run("impl=DecodeInput", func(b *testing.B) {
		var in core.Input
		for b.Loop() {
			if err := DecodeInput(enc, &in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=CheckBatch+UnmarshalMsg", func(b *testing.B) {
		var in core.Input
		for b.Loop() {
			if err := CheckBatch(enc); err != nil {
				b.Fatal(err)
			}
			in = core.Input{Join: in.Join[:0], Inbound: in.Inbound[:0], Commands: in.Commands[:0]}
			if _, err := UnmarshalInput(enc, &in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
