package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/testwasm"
)

// TestTrapOutOfMemory: a genuine fault inside the module. With a small
// memory limit, joining groups until the Go runtime in the module runs out
// of memory kills the instance (unrecoverable in the guest); the Engine
// restores a new instance with the groups that had joined.
func TestTrapOutOfMemory(t *testing.T) {
	ctx := context.Background()
	r, err := NewRuntime(ctx, Config{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), MemoryLimitPages: 80, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var trap error
	eng, err := r.NewEngine(ctx, EngineConfig{OnTrap: func(err error) { trap = err }})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	members := make([]string, 2000)
	for i := range members {
		members[i] = fmt.Sprintf("member-%04d-with-a-longish-name", i)
	}
	joined := 0
	for g := 0; g < 200 && trap == nil; g++ {
		var out core.Output
		in := core.Input{Now: int64(g), Join: []core.GroupSpec{{Config: core.Config{ID: members[0], Group: fmt.Sprintf("g%d", g), Members: members}}}}
		err := eng.Step(&in, &out)
		if err == nil {
			joined++
			continue
		}
		if !errors.Is(err, ErrTrap) {
			t.Fatalf("group %d: %v", g, err)
		}
		var te *TrapError
		errors.As(err, &te)
		t.Logf("trap after %d groups: %v (restored=%v)", joined, te.Err, te.Restored)
	}
	if trap == nil {
		t.Fatal("the module never ran out of memory")
	}
	// Whether the restore fit in memory or not, the engine reports it and
	// keeps its record of the groups.
	if n := len(eng.Groups()); n != joined {
		t.Fatalf("engine tracks %d groups, %d joined", n, joined)
	}
}
