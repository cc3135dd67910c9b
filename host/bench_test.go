package host

import (
	"context"
	"testing"

	"github.com/electcore/electcore/core"
)

// benchBatch builds a realistic batch for member "b" of a 5-member quorum
// group: a leader's heartbeat arriving, as msgp, plus the engine state to
// receive it (joined, and a leader "a" known).
func benchSetup(tb testing.TB, st interface {
	Step(*core.Input, *core.Output) error
}) *core.Input {
	ids := []string{"a", "b", "c", "d", "e"}
	var out core.Output
	if err := st.Step(&core.Input{Now: 1, Join: []core.GroupSpec{{Config: core.Config{ID: "b", Group: "g", Members: ids}}}}, &out); err != nil {
		tb.Fatal(err)
	}
	// A leader "a" at term 1 announces itself; then heartbeats follow.
	lead := core.Message{Topic: core.Topic("g"), Payload: []byte(`{"type":"leader","leader":"a","term":1,"from":"a","group":"g"}`)}
	out.Reset()
	if err := st.Step(&core.Input{Now: 2, Inbound: []core.Message{lead}}, &out); err != nil {
		tb.Fatal(err)
	}
	return &core.Input{Now: 3, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: []byte(`{"type":"heartbeat","leader":"a","term":1,"from":"a","group":"g","seq":1}`)}}}
}

type nativeStepper struct{ e *core.Engine }

func (n nativeStepper) Step(in *core.Input, out *core.Output) error { n.e.Step(in, out); return nil }

func benchStep(b *testing.B, st interface {
	Step(*core.Input, *core.Output) error
}, empty bool) {
	in := benchSetup(b, st)
	if empty {
		in.Inbound = nil
	}
	var out core.Output
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		in.Now = 3 + int64(i%50) // stay inside the election timeout
		out.Reset()
		if err := st.Step(in, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStep: the same batch through the native core and the wasm module.
func BenchmarkStep(b *testing.B) {
	b.Run("impl=native/batch=heartbeat", func(b *testing.B) { benchStep(b, nativeStepper{core.NewEngine()}, false) })
	b.Run("impl=wasm/batch=heartbeat", func(b *testing.B) {
		inst, err := testRuntime(b).NewInstance(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer inst.Close(context.Background())
		benchStep(b, inst, false)
	})
	b.Run("impl=native/batch=empty", func(b *testing.B) { benchStep(b, nativeStepper{core.NewEngine()}, true) })
	b.Run("impl=wasm/batch=empty", func(b *testing.B) {
		inst, err := testRuntime(b).NewInstance(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer inst.Close(context.Background())
		benchStep(b, inst, true)
	})
}
