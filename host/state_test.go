package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport/mem"
)

// TestJoinRefusesUnusableState: a state that exists but cannot be trusted
// (corrupt file, undecodable bytes, another group's state, a file that
// vanished) makes Join fail instead of restarting the member at term 0; a
// good state resumes its term.
func TestJoinRefusesUnusableState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := statestore.Open(dir, statestore.Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	ag, err := testRuntime(t).NewAgent(ctx, AgentConfig{Transport: bus.Transport("a"), Store: store, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	cfg := func(group string) core.Config {
		return core.Config{ID: "a", Group: group, Members: []string{"a", "b", "c"}}
	}
	save := func(group string, st core.GroupState) {
		b, _ := abi.MarshalState(nil, &st)
		if err := store.Save(StateName("a", group), b); err != nil {
			t.Fatal(err)
		}
	}
	// Undecodable bytes.
	if err := store.Save(StateName("a", "g1"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	// Another group's state.
	save("g2", core.GroupState{Group: "other", Term: 3})
	// A corrupt file on disk.
	save("g3", core.GroupState{Group: "g3", Term: 3})
	name, _ := statestore.FileName(StateName("a", "g3"))
	if err := os.WriteFile(filepath.Join(dir, name), []byte("ECSTxxxxxxxxxxxxxxxxxxxxxx"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file that vanished after it was saved.
	save("g4", core.GroupState{Group: "g4", Term: 3})
	name, _ = statestore.FileName(StateName("a", "g4"))
	os.Remove(filepath.Join(dir, name))
	for _, g := range []string{"g1", "g2", "g3", "g4"} {
		if _, err := ag.Join(ctx, cfg(g), Callbacks{}); !errors.Is(err, ErrStateUnusable) {
			t.Errorf("%s: Join returned %v, want ErrStateUnusable", g, err)
		} else {
			t.Logf("%s: %v", g, err)
		}
	}
	// A good state resumes its term and vote.
	save("g5", core.GroupState{Group: "g5", Term: 7, Vote: "b"})
	el, err := ag.Join(ctx, cfg("g5"), Callbacks{})
	if err != nil {
		t.Fatal(err)
	}
	if st := el.Status(); st.Term != 7 || st.Vote != "b" {
		t.Fatalf("resumed status %+v", st)
	}
	// A group name with a '/' maps to a valid state name.
	if _, err := ag.Join(ctx, cfg("team/jobs"), Callbacks{}); err != nil {
		t.Fatal(err)
	}
}

// TestNilStorePointerKeepsStateInMemory: an unset *statestore.Store in
// AgentConfig.Store (a non-nil interface holding nil) means no store, as
// nil does, instead of failing on first use.
func TestNilStorePointerKeepsStateInMemory(t *testing.T) {
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	var store *statestore.Store
	ag, err := NewNativeAgent(context.Background(), AgentConfig{Transport: bus.Transport("a"), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(context.Background())
	if _, err := ag.Join(context.Background(), fastConfig("a", "g", []string{"a"}), Callbacks{}); err != nil {
		t.Fatal(err)
	}
}

// A state name costs one allocation (the agent names a state at every
// save of every group).
func TestStateNameAllocatesOnce(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { StateName("agent-1", "group-1") }); n > 1 {
		t.Fatalf("StateName: %v allocations", n)
	}
	if got := StateName("a/b%", "g/1"); got != "a%2Fb%25=g%2F1" {
		t.Fatalf("StateName = %q", got)
	}
}
