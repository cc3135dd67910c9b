package wasmhost

import (
	"context"
	"fmt"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/testwasm"
)

// The module's collector finishes its cycles although a module instance
// runs Go code only inside calls: each step yields to the runtime's other
// goroutines, its background mark workers among them (letCollectorRun in
// wasm/main.go). Without that, a cycle begun in a storm of pre-votes
// between status reads never ended: 3,000 groups, no collection finished
// in 140 rounds while the heap grew from 8 to 20 MiB (and would have grown
// until memory ran out); with it, two more by round 130.
func TestModuleCollectorFinishesCycles(t *testing.T) {
	const groups, rounds = 3000, 100
	path, err := testwasm.Module(testwasm.TrapTestTag) // ec_test_heap
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRuntime(context.Background(), Config{WasmPath: path, CacheDir: testwasm.CacheDir(), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	inst, err := r.NewInstance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	collections := func() uint64 {
		inst.mu.Lock()
		defer inst.mu.Unlock()
		n, err := inst.call("test_heap", inst.mod.ExportedFunction("ec_test_heap"), 4, 0) // NumGC
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	defer inst.Close(context.Background())
	var out core.Output
	step := func(in *core.Input, round int) {
		out.Reset()
		if err := inst.Step(in, &out); err != nil {
			t.Fatalf("round %d: %v (linear memory %d MiB)", round, err, inst.MemoryBytes()>>20)
		}
	}
	for start := 0; start < groups; start += 250 {
		in := core.Input{Now: 1}
		for g := start; g < start+250; g++ {
			in.Join = append(in.Join, core.GroupSpec{Config: core.Config{ID: "b", Group: fmt.Sprintf("group-%05d", g), Members: []string{"a", "b", "c"}}})
		}
		step(&in, 0)
	}
	now := int64(1)
	var before uint64
	for round := range rounds {
		if round == 10 {
			before = collections()
		}
		now += 20_000 // past every campaign's deadline
		for {
			in := core.Input{Now: now}
			for g := round % 3; g < groups; g += 3 {
				in.Inbound = append(in.Inbound, core.Message{Topic: core.Topic(fmt.Sprintf("group-%05d", g)),
					Payload: fmt.Appendf(nil, `{"type":"election","group":"group-%05d","from":"a","candidate":"a","priority":1,"term":%d,"pre":true}`, g, round+2)})
				if len(in.Inbound) == 256 {
					step(&in, round)
					in.Inbound = in.Inbound[:0]
					for s := range 200 { // a host's probe of its groups
						if _, _, err := inst.Status(fmt.Sprintf("group-%05d", (g+s)%groups)); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			step(&in, round)
			if out.WakeAt > now {
				break
			}
		}
	}
	after := collections()
	t.Logf("collections: %d after 10 rounds, %d after %d; linear memory %d MiB", before, after, rounds, inst.MemoryBytes()>>20)
	if after == before {
		t.Fatalf("no collection finished in %d rounds of a storm", rounds-10)
	}
}
