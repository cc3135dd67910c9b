package wasmhost

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/core/sim"
)

// TestDifferentialSim runs the simulator's fault-mix swarms (core/sim) with
// every node stepping the native core and the wasm module side by side, and
// requires byte-identical msgp output for every batch, on both modes.
// ELECTCORE_SIM_SEEDS overrides the seed count (default 300; -short 40).
func TestDifferentialSim(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 40
	}
	if v, err := strconv.Atoi(os.Getenv("ELECTCORE_SIM_SEEDS")); err == nil {
		seeds = v
	}
	pool := &instancePool{rt: testRuntime(t)}
	defer pool.close()
	var total int64
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		mode := core.ModeQuorum
		if seed%2 == 0 {
			mode = core.ModeBully
		}
		var diff string
		steps := 0
		res, err := sim.Run(sim.Options{
			Seed: seed, Mode: mode, Nodes: 3 + int(seed%3),
			NewStepper: func(id string) (sim.Stepper, error) {
				return &dualStepper{nat: core.NewEngine(), inst: pool.get(t), steps: &steps, diff: &diff,
					label: fmt.Sprintf("seed %d %s node %s", seed, mode, id)}, nil
			},
		})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if diff != "" {
			t.Fatalf("seed %d: %s", seed, diff)
		}
		if len(res.Violations) > 0 {
			t.Errorf("seed %d %s: simulator invariant violations through the wasm engine: %+v", seed, mode, res.Violations[0])
		}
		total += res.Steps
		pool.recycle(t)
	}
	t.Logf("%d simulator seeds, %d batches byte-identical (native vs wasm)", seeds, total)
}
