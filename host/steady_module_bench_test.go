//go:build unix

package host

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/electcore/electcore/internal/testwasm"
	"github.com/electcore/electcore/internal/wasmhost"
)

// BenchmarkSwarmSteadyModule is BenchmarkSwarmSteady's wasm-1000 on the
// module's test build, which reports its own heap statistics: per agent
// and op, the module's allocations and bytes allocated, its completed
// collections and the agent's steps, and the process's CPU time per op
// (user + system, getrusage: unlike the op's wall time it leaves out time
// spent descheduled on a shared machine, though not the slowdown of sharing
// a core's caches). $ELECTCORE_WASM_TRAPTEST names a test build to run
// instead of building one (before/after comparisons); with
// $ELECTCORE_PERF_CTL naming the control fifo of a `perf record -D -1
// --control=fifo:...`, the benchmark profiles its measured windows
// only (with wazero's perfmap build tag and no compilation cache,
// the profile names the module's functions by index; host/BENCHMARKS.md).
func BenchmarkSwarmSteadyModule(b *testing.B) {
	path := os.Getenv("ELECTCORE_WASM_TRAPTEST")
	if path == "" {
		var err error
		if path, err = testwasm.Module(testwasm.TrapTestTag); err != nil { // ec_test_heap
			b.Fatal(err)
		}
	}
	w, err := wasmhost.NewRuntime(context.Background(), wasmhost.Config{WasmPath: path, CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(context.Background())
	s := newSteadySwarm(b, 1000, &testRT{w})
	s.settle(b)
	heap := func(what int32) (sum uint64) {
		for _, ag := range s.agents {
			v, ok, err := ag.eng.(*wasmhost.Engine).TestHeap(what)
			if err != nil || !ok {
				b.Fatal("ec_test_heap:", ok, err)
			}
			sum += v
		}
		return sum
	}
	steps := func() (sum uint64) {
		for _, ag := range s.agents {
			sum += ag.c.steps.Load()
		}
		return sum
	}
	cpu := func() int64 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	mallocs0, bytes0, gcs0, steps0, cpu0 := heap(6), heap(5), heap(4), steps(), cpu()
	perfCtl := func(cmd string) { // perf record --control=fifo:CTL,ACK -D -1: profile the windows only
		if p := os.Getenv("ELECTCORE_PERF_CTL"); p != "" {
			os.WriteFile(p, []byte(cmd+"\n"), 0)
		}
	}
	perfCtl("enable")
	b.ResetTimer()
	for range b.N {
		for range 25 {
			s.tick(20)
		}
	}
	b.StopTimer()
	perfCtl("disable")
	per := func(v uint64) float64 { return float64(v) / float64(b.N) / 3 }
	b.ReportMetric(per(heap(6)-mallocs0), "module-allocs/agent/op")
	b.ReportMetric(per(heap(5)-bytes0), "module-B/agent/op")
	b.ReportMetric(per(heap(4)-gcs0), "module-GCs/agent/op")
	b.ReportMetric(per(steps()-steps0), "steps/agent/op")
	b.ReportMetric(float64(cpu()-cpu0)/float64(b.N)/3/500e6*100, "cpu%/agent")
	if v, _, _ := s.agents[0].eng.(*wasmhost.Engine).TestHeap(0); v > 0 {
		b.ReportMetric(float64(v)/(1<<20), "module-heap-MiB")
	}
	if !s.settled() {
		b.Fatal("a group lost its leader during the benchmark")
	}
}
