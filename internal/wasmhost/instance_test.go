package wasmhost

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/electcore/electcore/core"
)

func TestInstanceBasics(t *testing.T) {
	ctx := context.Background()
	r := testRuntime(t)
	inst, err := r.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	cfg := core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}
	var out core.Output
	if err := inst.Join(core.GroupSpec{Config: cfg}, 1, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Events) == 0 || out.Events[0].Kind != core.EventJoined || out.WakeAt == 0 {
		t.Fatalf("join output %+v", out)
	}
	// A second join of the same group is refused and changes nothing.
	out.Reset()
	err = inst.Join(core.GroupSpec{Config: cfg}, 2, &out)
	var me *ModuleError
	if !errors.As(err, &me) || me.Code != CodeRejected {
		t.Fatalf("second join: %v", err)
	}
	st, ok, err := inst.Status("g")
	if err != nil || !ok || st.ID != "a" || st.Role != core.RoleFollower {
		t.Fatalf("status %+v %v %v", st, ok, err)
	}
	if _, ok, err := inst.Status("nope"); ok || err != nil {
		t.Fatalf("status of unknown group: %v %v", ok, err)
	}
	// Garbage msgp is refused without a trap.
	if _, err := inst.StepBytes([]byte{0xc1, 0xff}); !errors.As(err, &me) || me.Code != CodeDecode {
		t.Fatalf("garbage input: %v", err)
	}
	// Oversized input is refused before it reaches the module.
	if _, err := inst.StepBytes(make([]byte, core.MaxBatchBytes+1)); !errors.As(err, &me) || me.Code != CodeTooLarge {
		t.Fatalf("oversized input: %v", err)
	}
	// A timer step still works after the errors.
	out.Reset()
	if err := inst.Step(&core.Input{Now: out.WakeAt + 10_000}, &out); err != nil {
		t.Fatal(err)
	}
	if err := inst.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := inst.Status("g"); ok {
		t.Fatal("group survived Reset")
	}
}

func TestMissingModule(t *testing.T) {
	_, err := NewRuntime(context.Background(), Config{WasmPath: "/nonexistent/electcore.wasm"})
	if !errors.Is(err, ErrNoModule) {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
}

// TestBuiltInModule: with no module named anywhere, the runtime loads the one
// built into the program (internal/module) and says so.
func TestBuiltInModule(t *testing.T) {
	t.Setenv(EnvWasm, "")
	r, err := NewRuntime(context.Background(), Config{CacheDir: NoDiskCache, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if r.Path() != "" || r.describe() != builtIn {
		t.Fatalf("path %q, describe %q", r.Path(), r.describe())
	}
	// A named file that is missing is an error, never silently replaced.
	t.Setenv(EnvWasm, "/nonexistent/electcore.wasm")
	if _, err := NewRuntime(context.Background(), Config{}); !errors.Is(err, ErrNoModule) || !strings.Contains(err.Error(), "$ELECTCORE_WASM") {
		t.Fatalf("got %v", err)
	}
}
