package wasmhost

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/testwasm"
)

// stormInstance joins groups groups (ID "b" of a, b, c) in batches of 250
// and then runs rounds of a storm: each round every campaign is long due
// and a third of the groups hear pre-votes of a later term. It fails the
// test if the module traps.
func stormInstance(t *testing.T, inst *Instance, groups, rounds int) {
	t.Helper()
	var out core.Output
	for start := 0; start < groups; start += 250 {
		in := core.Input{Now: 1}
		for g := start; g < min(start+250, groups); g++ {
			in.Join = append(in.Join, core.GroupSpec{Config: core.Config{ID: "b", Group: fmt.Sprintf("group-%05d", g), Members: []string{"a", "b", "c"}}})
		}
		out.Reset()
		if err := inst.Step(&in, &out); err != nil {
			t.Fatalf("joining: %v (linear memory %d MiB, bound %d MiB)", err, inst.MemoryBytes()>>20, inst.MemoryBound()>>20)
		}
	}
	now := int64(1)
	for round := range rounds {
		now += 20_000 // past every campaign's deadline
		for {
			in := core.Input{Now: now}
			for g := 0; g < groups; g += 3 {
				in.Inbound = append(in.Inbound, core.Message{Topic: core.Topic(fmt.Sprintf("group-%05d", g)),
					Payload: fmt.Appendf(nil, `{"type":"election","group":"group-%05d","from":"a","candidate":"a","term":%d,"pre":true}`, g, round+2)})
			}
			out.Reset()
			if err := inst.Step(&in, &out); err != nil {
				t.Fatalf("round %d: %v (linear memory %d MiB, bound %d MiB)", round, err, inst.MemoryBytes()>>20, inst.MemoryBound()>>20)
			}
			if out.WakeAt > now {
				break
			}
		}
	}
}

func boundedRuntime(t *testing.T, pages uint32) *Runtime {
	t.Helper()
	// A storm round is one step of thousands of messages: on a loaded
	// machine longer than the default call deadline, which is not what
	// these tests are about.
	r, err := NewRuntime(context.Background(), Config{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger(), MemoryLimitPages: pages, CallTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// The module's collector keeps its heap within the linear memory's bound
// while the live data fits (goMemLimit): 2,000 groups in a fixed 10 MiB,
// each campaign long due and a third of the groups hearing pre-votes of a
// later term round after round, ran out of memory and trapped when Go let
// the heap grow to twice its live data.
func TestModuleCollectsWithinItsMemoryBound(t *testing.T) {
	base, per := memoryBase, memoryPerGroup
	memoryBase, memoryPerGroup = 0, 0 // the bound stays MemoryLimitPages
	t.Cleanup(func() { memoryBase, memoryPerGroup = base, per })
	inst, err := boundedRuntime(t, 160).NewInstance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	stormInstance(t, inst, 2000, 30)
}

// An instance's memory bound follows the groups it joins: 5,000 groups
// need more than a 10 MiB bound (they trapped, out of memory, while
// joining when the bound was fixed), and get it, with the collector's soft
// limit raised alike.
func TestMemoryBoundFollowsGroups(t *testing.T) {
	const pages, groups = 160, 5000
	inst, err := boundedRuntime(t, pages).NewInstance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	if b := inst.MemoryBound(); b != max(pages*65536, memoryBase) {
		t.Fatalf("bound of a fresh instance: %d, want %d", b, max(pages*65536, memoryBase))
	}
	stormInstance(t, inst, groups, 5)
	want := memoryBound(pages, groups)
	if b := inst.MemoryBound(); b != want || b <= pages*65536 {
		t.Fatalf("bound with %d groups: %d MiB, want %d MiB", groups, b>>20, want>>20)
	}
	if m := inst.MemoryBytes(); m <= memoryBound(pages, 0) {
		t.Fatalf("linear memory %d MiB: the groups fit the bound of none, so this test shows nothing", m>>20)
	}
	inst.mu.Lock()
	limit, err := inst.call("memory_limit", inst.fLimit, ^uint64(0)) // -1: read
	inst.mu.Unlock()
	if err != nil || limit != goMemLimit(want) {
		t.Fatalf("module's soft limit %d (%v), want %d", limit, err, goMemLimit(want))
	}
	t.Logf("%d groups: linear memory %d MiB, bound %d MiB", groups, inst.MemoryBytes()>>20, want>>20)
}

func TestMemoryBound(t *testing.T) {
	for _, c := range []struct {
		pages  uint32
		groups int
		want   uint64
	}{
		{1024, 0, 64 << 20},
		{1024, 3000, 64 << 20},
		{1024, 10000, memoryBase + 10000*memoryPerGroup},
		{4096, 10000, 256 << 20},
		{160, 0, memoryBase},
		{160, 1, (memoryBase + memoryPerGroup + 65535) &^ 65535},
		{1024, 10001, (memoryBase + 10001*memoryPerGroup + 65535) &^ 65535},
		{1024, 1 << 30, maxMemoryBytes},
	} {
		if got := memoryBound(c.pages, c.groups); got != c.want {
			t.Errorf("memoryBound(%d, %d) = %d, want %d", c.pages, c.groups, got, c.want)
		}
	}
}
