package wasmhost

import (
	"context"
	"fmt"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/testwasm"
)

// The module's collector keeps its heap within the linear memory's bound
// while the live data fits (goMemLimit): 2,000 groups in 10 MiB, each
// campaign long due and a third of the groups hearing pre-votes of a later
// term round after round, ran out of memory and trapped when Go let the
// heap grow to twice its live data.
func TestModuleCollectsWithinItsMemoryBound(t *testing.T) {
	const pages, groups = 160, 2000
	r, err := NewRuntime(context.Background(), Config{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger(), MemoryLimitPages: pages})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := r.NewInstance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	var out core.Output
	for start := 0; start < groups; start += 250 {
		in := core.Input{Now: 1}
		for g := start; g < start+250; g++ {
			in.Join = append(in.Join, core.GroupSpec{Config: core.Config{ID: "b", Group: fmt.Sprintf("group-%05d", g), Members: []string{"a", "b", "c"}}})
		}
		out.Reset()
		if err := inst.Step(&in, &out); err != nil {
			t.Fatalf("joining: %v", err)
		}
	}
	now := int64(1)
	for round := range 30 {
		now += 20_000 // past every campaign's deadline
		for {
			in := core.Input{Now: now}
			for g := 0; g < groups; g += 3 {
				in.Inbound = append(in.Inbound, core.Message{Topic: core.Topic(fmt.Sprintf("group-%05d", g)),
					Payload: fmt.Appendf(nil, `{"type":"election","group":"group-%05d","from":"a","candidate":"a","term":%d,"pre":true}`, g, round+2)})
			}
			out.Reset()
			if err := inst.Step(&in, &out); err != nil {
				t.Fatalf("round %d: %v (linear memory %d MiB of %d)", round, err, inst.MemoryBytes()>>20, pages*65536>>20)
			}
			if out.WakeAt > now {
				break
			}
		}
	}
}
