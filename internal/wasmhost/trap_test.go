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

// A restore re-joins every group, which raises its epoch, but asks the
// host to save only what a group sends: with authentication the new epoch
// (signed messages carry it); without, nothing, since the state differs
// from the one saved only in the epoch (each save may be a synced write,
// thousands of them after a trap). Terms and votes are restored as saved.
func TestRestorePersistsOnlyWhatIsSent(t *testing.T) {
	ctx := context.Background()
	eng, err := testRuntime(t).NewEngine(ctx, EngineConfig{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	ids := []string{"a", "b", "c"}
	in := core.Input{Now: 1, Join: []core.GroupSpec{
		{Config: core.Config{ID: "a", Group: "plain", Members: ids}},
		{Config: core.Config{ID: "a", Group: "signed", Members: ids, Auth: core.AuthHMAC, Key: []byte("0123456789abcdef0123456789abcdef")}},
		{Config: core.Config{ID: "a", Group: "voted", Members: ids}},
	}}
	var out core.Output
	if err := eng.Step(&in, &out); err != nil {
		t.Fatal(err)
	}
	// "voted" grants a vote in term 2: its state changes, and is saved.
	out.Reset()
	if err := eng.Step(&core.Input{Now: 5000, Inbound: []core.Message{{Topic: core.Topic("voted"),
		Payload: []byte(`{"type":"election","group":"voted","from":"b","candidate":"b","priority":1,"term":2}`)}}}, &out); err != nil {
		t.Fatal(err)
	}
	voted, _ := eng.PersistedState("voted")
	if voted.Term != 2 || voted.Vote != "b" {
		t.Fatalf("voted: %+v, want term 2, vote b", voted)
	}
	before := map[string]core.GroupState{}
	for _, g := range eng.Groups() {
		before[g], _ = eng.PersistedState(g)
	}
	eng.InjectTrap()
	out.Reset()
	var te *TrapError
	if err := eng.Step(&core.Input{Now: 5001}, &out); !errors.As(err, &te) || !te.Restored {
		t.Fatalf("step after the trap: %v", err)
	}
	var saved []string
	for _, p := range out.Persist {
		saved = append(saved, p.Group)
		if p.Epoch != before[p.Group].Epoch+1 {
			t.Errorf("%s saved with epoch %d, want %d", p.Group, p.Epoch, before[p.Group].Epoch+1)
		}
	}
	if fmt.Sprint(saved) != "[signed]" {
		t.Fatalf("the restore asked to save %v, want [signed]", saved)
	}
	// The engine still tracks the raised epochs, for the next restore.
	for _, g := range eng.Groups() {
		if st, _ := eng.PersistedState(g); st.Epoch != before[g].Epoch+1 || st.Term != before[g].Term {
			t.Errorf("%s tracked as %+v after the restore, was %+v", g, st, before[g])
		}
	}
}
