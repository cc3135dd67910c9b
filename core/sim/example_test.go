package sim_test

import (
	"fmt"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/core/sim"
)

// A failover measurement: five nodes at the defaults on a 100 ms bus; the
// settled leader is crashed three times.
func ExampleRun() {
	res, err := sim.Run(sim.Options{Seed: 7, Mode: core.ModeQuorum, Scenario: sim.ScenarioFailover, Nodes: 5, Cycles: 3})
	if err != nil {
		panic(err)
	}
	fmt.Println("violations:", len(res.Violations))
	for _, f := range res.Failovers {
		fmt.Printf("%s crashed at %d ms: %s elected %d ms later, known to all after %d ms\n",
			f.Leader, f.AtMs, f.NewLeader, f.ElectedMs, f.KnownMs)
	}
	// Output:
	// violations: 0
	// n3 crashed at 5470 ms: n4 elected 2378 ms later, known to all after 2483 ms
	// n3 crashed at 13439 ms: n4 elected 2076 ms later, known to all after 2196 ms
	// n4 crashed at 20752 ms: n3 elected 2164 ms later, known to all after 2279 ms
}

// BenchmarkFaultMix reports seeds per second of the fault mix on one core.
func BenchmarkFaultMix(b *testing.B) {
	for _, mode := range []core.Mode{core.ModeQuorum, core.ModeBully} {
		b.Run(string(mode), func(b *testing.B) {
			for i := range b.N {
				if _, err := sim.Run(sim.Options{Seed: uint64(i + 1), Mode: mode}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seeds/s")
		})
	}
}
