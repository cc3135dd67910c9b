package wasmhost

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

// steadyTrace is what member a1 of a settled swarm is given: three members
// (a1, a2, a3, named as benchscale names them) in every one of n groups,
// balanced priorities, wall clock on, stepped every 20 ms, each member's
// publishes delivered to the two others (own echoes dropped, as the agent
// drops them) — the batches of a real agent's steady state, per-group
// payloads as the coalescer hands them to the core. setup is every batch until the swarm settled (and 2 s more);
// steady the next window, msgp-encoded as the host sends them; payloads the
// messages in steady.
type steadyTrace struct {
	setup, steady [][]byte
	payloads      int
}

// recordSteady runs the swarm natively (the module writes the same bytes) and
// records a's batches.
func recordSteady(tb testing.TB, groups int, windowMs int64) *steadyTrace {
	ids := []string{"a1", "a2", "a3"} // as benchscale names them
	engines := map[string]*core.Engine{}
	inboxes := map[string][]core.Message{}
	const wall0 = 1_764_000_000_000
	var now int64 = 1
	joins := map[string][]core.GroupSpec{}
	for k, id := range ids {
		engines[id] = core.NewEngine()
		for i := range groups {
			joins[id] = append(joins[id], core.GroupSpec{
				Config:      core.Config{ID: id, Group: "bench-" + strconv.Itoa(100000 + i)[1:], Members: ids, BalancedPriority: true},
				Incarnation: 0x9e3779b97f4a7c15 * uint64(k+1), // 20 digits, as random ones mostly are
			})
		}
	}
	tr := &steadyTrace{}
	var out core.Output
	step := func(record *[][]byte) int {
		n := 0
		for _, id := range ids {
			in := core.Input{Now: now, Wall: wall0 + now, Join: joins[id], Inbound: inboxes[id]}
			joins[id], inboxes[id] = nil, nil
			if id == "a1" && record != nil {
				b, err := abi.MarshalInput(nil, &in)
				if err != nil {
					tb.Fatal(err)
				}
				*record = append(*record, b)
				n += len(in.Inbound)
			}
			out.Reset()
			engines[id].Step(&in, &out)
			for _, p := range out.Publishes {
				for _, to := range ids {
					if to != id {
						inboxes[to] = append(inboxes[to], core.Message{Topic: p.Topic, Payload: append([]byte(nil), p.Payload...)})
					}
				}
			}
		}
		now += 20
		return n
	}
	settled := func() bool {
		for i := range groups {
			name := "bench-" + strconv.Itoa(100000 + i)[1:]
			st, _ := engines["a1"].Status(name)
			if st.Leader == "" {
				return false
			}
			for _, id := range ids[1:] {
				if s, _ := engines[id].Status(name); s.Leader != st.Leader {
					return false
				}
			}
		}
		return true
	}
	for t := 0; !settled(); t++ {
		if t > 3000 {
			tb.Fatal("not settled within 60 s of swarm time")
		}
		step(&tr.setup)
	}
	for range 100 { // priority hand-offs, then quiet
		step(&tr.setup)
	}
	for range windowMs / 20 {
		tr.payloads += step(&tr.steady)
	}
	return tr
}

// BenchmarkSteadyPayload is the module's cost per payload in a settled
// swarm's steady state (steadyTrace: heartbeats in and acks out for the
// groups a follows, heartbeats out and acks in for those it leads): a's
// recorded batches replayed, in alternating blocks of 16 batches, into the
// module and into the native core doing the module's work (abi.DecodeInput,
// Step, abi.EncodeOutput), and with $ELECTCORE_WASM_BASELINE into that
// build of the module too. Each block is timed in thread CPU time; the
// figures are per payload received, medians over the blocks, and
// x-baseline / x-native-msgp the medians of the per-block ratios. One op is
// one replay of the steady window (after the setup, untimed).
func BenchmarkSteadyPayload(b *testing.B) {
	tr := recordSteady(b, 300, 10_000)
	runtime.LockOSThread() // threadCPU reads this thread's clock
	defer runtime.UnlockOSThread()
	baseline := os.Getenv("ELECTCORE_WASM_BASELINE") != ""
	var nat, wasm, base, xNative, xBase []float64
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		native := newMsgpStepper()
		rts := []*Runtime{testRuntime(b)}
		if baseline {
			rts = append(rts, baselineRuntime(b))
		}
		var insts []*Instance
		for _, rt := range rts {
			inst, err := rt.NewInstance(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			insts = append(insts, inst)
		}
		for _, batch := range tr.setup {
			native.inb = batch
			native.stepBytes()
			for _, inst := range insts {
				if _, err := inst.StepBytes(batch); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
		const block = 16
		for j := 0; j < len(tr.steady); j += block {
			batches := tr.steady[j:min(j+block, len(tr.steady))]
			n := 0
			for _, batch := range batches {
				n += inboundCount(b, batch)
			}
			if n == 0 {
				continue
			}
			t0 := threadCPU()
			for _, batch := range batches {
				native.inb = batch
				native.stepBytes()
			}
			t0 = threadCPU() - t0
			// The two modules take turns going first.
			t := make([]int64, len(insts))
			for k := range insts {
				side := k
				if j/block%2 == 1 {
					side = len(insts) - 1 - k
				}
				t1 := threadCPU()
				for _, batch := range batches {
					if _, err := insts[side].StepBytes(batch); err != nil {
						b.Fatal(err)
					}
				}
				t[side] = threadCPU() - t1
			}
			nn, wn := float64(t0)/float64(n), float64(t[0])/float64(n)
			nat, wasm = append(nat, nn), append(wasm, wn)
			if nn > 0 {
				xNative = append(xNative, wn/nn)
			}
			if baseline {
				bn := float64(t[1]) / float64(n)
				base = append(base, bn)
				if bn > 0 {
					xBase = append(xBase, wn/bn)
				}
			}
		}
		b.StopTimer()
		for _, inst := range insts {
			inst.Close(context.Background())
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(tr.payloads), "payloads/op")
	b.ReportMetric(median(nat), "native-msgp-ns/payload")
	b.ReportMetric(median(wasm), "wasm-ns/payload")
	b.ReportMetric(median(xNative), "x-native-msgp")
	if baseline {
		b.ReportMetric(median(base), "baseline-ns/payload")
		b.ReportMetric(median(xBase), "x-baseline")
	}
}

// inboundCount is the number of messages in an encoded Input.
func inboundCount(tb testing.TB, batch []byte) int {
	var in core.Input
	if err := abi.DecodeInput(batch, &in); err != nil {
		tb.Fatal(err)
	}
	return len(in.Inbound)
}

// BenchmarkSteadyNative replays the steady window into the native core
// alone (Engine.Step, payload memory reused as in the module): its time
// and allocations per payload.
func BenchmarkSteadyNative(b *testing.B) {
	tr := recordSteady(b, 300, 10_000)
	decode := func(batches [][]byte) []core.Input {
		ins := make([]core.Input, len(batches))
		for k, batch := range batches {
			if err := abi.DecodeInput(batch, &ins[k]); err != nil {
				b.Fatal(err)
			}
		}
		return ins
	}
	setup, steady := decode(tr.setup), decode(tr.steady)
	runtime.LockOSThread() // threadCPU reads this thread's clock
	defer runtime.UnlockOSThread()
	var out core.Output
	var allocs, ns float64
	for b.Loop() {
		b.StopTimer()
		e := core.NewEngine()
		e.ReusePayloads()
		for k := range setup {
			out.Reset()
			e.Step(&setup[k], &out)
		}
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		b.StartTimer()
		t0 := threadCPU()
		for k := range steady {
			out.Reset()
			e.Step(&steady[k], &out)
		}
		ns += float64(threadCPU() - t0)
		b.StopTimer()
		runtime.ReadMemStats(&ms1)
		allocs += float64(ms1.Mallocs - ms0.Mallocs)
		b.StartTimer()
	}
	b.ReportMetric(ns/float64(b.N)/float64(tr.payloads), "cpu-ns/payload")
	b.ReportMetric(allocs/float64(b.N)/float64(tr.payloads), "allocs/payload")
}
