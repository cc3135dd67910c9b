package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/testwasm"
)

// The sandbox: an instance may run out of its memory limit, overrun its call
// deadline or trap outright; each time the Engine replaces it and restores
// every group from its persisted state (term, vote and, with authentication,
// a higher epoch), and the next step works. Hostile batches are refused
// before any decoder recurses into them.

// sandboxEngine returns an engine on r with group "g" joined as member "a"
// with auth, restarted from persisted term 7 (vote "b", epoch 3).
func sandboxEngine(t *testing.T, r *Runtime) (*Engine, *[]error) {
	t.Helper()
	var mu sync.Mutex
	var traps []error
	eng, err := r.NewEngine(context.Background(), EngineConfig{Logger: discardLogger(), OnTrap: func(err error) {
		mu.Lock()
		traps = append(traps, err)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	cfg := authTestConfig(core.AuthEd25519, "a", "g", []string{"a", "b", "c"})
	var out core.Output
	if err := eng.Step(&core.Input{Now: 10, Join: []core.GroupSpec{{Config: cfg, State: core.GroupState{Group: "g", Term: 7, Vote: "b", Epoch: 3}}}}, &out); err != nil {
		t.Fatal(err)
	}
	checkIntact(t, eng, 4)
	return eng, &traps
}

// checkIntact: group "g" is joined with its term and vote, at epoch epoch or
// later, persisted; and a step works.
func checkIntact(t *testing.T, eng *Engine, epoch uint64) {
	t.Helper()
	st, ok, err := eng.Status("g")
	if err != nil || !ok {
		t.Fatalf("status after recovery: %v %v", ok, err)
	}
	if st.Term != 7 || st.Vote != "b" || st.Epoch < epoch || st.Auth != core.AuthEd25519 {
		t.Fatalf("state after recovery: term %d vote %q epoch %d auth %s", st.Term, st.Vote, st.Epoch, st.Auth)
	}
	if p, ok := eng.PersistedState("g"); !ok || p.Term != 7 || p.Vote != "b" || p.Epoch != st.Epoch {
		t.Fatalf("persisted %+v, running epoch %d", p, st.Epoch)
	}
	var out core.Output
	if err := eng.Step(&core.Input{Now: 20}, &out); err != nil {
		t.Fatalf("step after recovery: %v", err)
	}
}

func TestSandboxMemoryLimit(t *testing.T) {
	ctx := context.Background()
	r, err := NewRuntime(ctx, Config{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), MemoryLimitPages: 96, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	eng, traps := sandboxEngine(t, r)
	members := make([]string, 3000)
	for i := range members {
		members[i] = fmt.Sprintf("member-%04d-with-a-rather-long-name-to-fill-memory", i)
	}
	var trap *TrapError
	for g := 0; g < 500 && trap == nil; g++ {
		var out core.Output
		in := core.Input{Now: 15, Join: []core.GroupSpec{{Config: core.Config{ID: members[0], Group: fmt.Sprintf("big%d", g), Members: members}}}}
		if err := eng.Step(&in, &out); err != nil && !errors.As(err, &trap) {
			t.Fatalf("group %d: %v", g, err)
		}
	}
	if trap == nil {
		t.Fatal("the memory limit was never reached")
	}
	t.Logf("memory limit: %v", trap)
	if len(*traps) == 0 {
		t.Fatal("OnTrap not called")
	}
	// The restore re-joins the big groups too; whether or not they all fit,
	// "g" keeps its state (it is restored first).
	st, ok, err := eng.Status("g")
	if err != nil || !ok || st.Term != 7 || st.Vote != "b" || st.Epoch < 5 {
		t.Fatalf("after the memory trap: %+v %v %v", st, ok, err)
	}
}

func TestSandboxDeadline(t *testing.T) {
	ctx := context.Background()
	r, err := NewRuntime(ctx, Config{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), CallTimeout: 100 * time.Millisecond, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	eng, traps := sandboxEngine(t, r)
	// One batch that joins thousands of authenticated groups: every join
	// derives an ed25519 public key, over 200 ms of work (measured), far more than 100 ms allows (a
	// deadline well above a normal step, so that the setup steps never hit
	// it on a loaded machine).
	var in core.Input
	in.Now = 15
	for g := range 2000 {
		c := authTestConfig(core.AuthEd25519, "a", fmt.Sprintf("slow%d", g), []string{"a", "b", "c"})
		in.Join = append(in.Join, core.GroupSpec{Config: c})
	}
	var out core.Output
	t0 := time.Now()
	err = eng.Step(&in, &out)
	var trap *TrapError
	if !errors.As(err, &trap) || !errors.Is(err, ErrDeadline) {
		t.Fatalf("a step past the deadline: %v", err)
	}
	if !trap.Restored {
		// On a loaded machine the restore can meet the deadline too; the
		// next step restores again.
		t.Logf("restore after the trap failed (%v); the next step retries it", err)
		var again core.Output
		if err := eng.Step(&core.Input{Now: 16}, &again); err != nil {
			t.Fatalf("the step after a failed restore: %v", err)
		}
	}
	t.Logf("deadline: %v after %v", err, time.Since(t0).Round(time.Millisecond))
	if len(*traps) != 1 || len(eng.Groups()) != 1 {
		t.Fatalf("traps %d, groups %v (the batch that trapped is lost)", len(*traps), eng.Groups())
	}
	checkIntact(t, eng, 5)
}

func TestSandboxTrappingModule(t *testing.T) {
	ctx := context.Background()
	path, err := testwasm.Module(testwasm.TrapTestTag)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRuntime(ctx, Config{WasmPath: path, CacheDir: testwasm.CacheDir(), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	eng, traps := sandboxEngine(t, r)
	for k, kind := range []string{"nil dereference", "runaway recursion"} {
		eng.mu.Lock()
		inst := eng.inst
		_, err := inst.call("test_trap", inst.mod.ExportedFunction("ec_test_trap"), uint64(k+1))
		eng.mu.Unlock()
		if !errors.Is(err, ErrTrap) {
			t.Fatalf("%s: %v", kind, err)
		}
		t.Logf("%s: %.200s", kind, err)
		// The next step finds the instance dead, replaces and restores it.
		var out core.Output
		err = eng.Step(&core.Input{Now: 30}, &out)
		var te *TrapError
		if !errors.As(err, &te) || !te.Restored {
			t.Fatalf("%s: step after the trap: %v", kind, err)
		}
		if len(*traps) != k+1 {
			t.Fatalf("OnTrap called %d times", len(*traps))
		}
		checkIntact(t, eng, uint64(5+k))
	}
}

// TestSandboxHostileBatches: batches nested a hundred thousand levels deep
// are refused in microseconds before any decoder sees them, by the host and
// by the module itself (for hosts that do not check), with no trap.
func TestSandboxHostileBatches(t *testing.T) {
	inst, err := testRuntime(t).NewInstance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	deep := []byte{0x82, 0xa3, 'n', 'o', 'w', 0x01, 0xa1, 'x'}
	deep = append(deep, bytes.Repeat([]byte{0x91}, core.MaxBatchBytes-len(deep)-1)...)
	deep = append(deep, 0xc0)
	t0 := time.Now()
	_, err = inst.StepBytes(deep)
	var me *ModuleError
	if !errors.As(err, &me) || me.Code != CodeDecode || !strings.Contains(me.Msg, "nested") {
		t.Fatalf("host: %v", err)
	}
	host := time.Since(t0)
	// Straight into the module, past the host's check.
	inst.mu.Lock()
	t0 = time.Now()
	werr := inst.write("step", deep)
	var r uint64
	if werr == nil {
		r, werr = inst.call("step", inst.fStep, uint64(len(deep)))
	}
	var b []byte
	if werr == nil {
		b, werr = inst.result("step", r)
	}
	inst.mu.Unlock()
	module := time.Since(t0)
	if !errors.As(werr, &me) || me.Code != CodeDecode || !strings.Contains(me.Msg, "nested") {
		t.Fatalf("module: %v %q", werr, b)
	}
	t.Logf("deep batch refused: by the host in %v, by the module in %v (%v)", host, module, werr)
	// Oversized batches never reach the module; the instance still works.
	if _, err := inst.StepBytes(make([]byte, core.MaxBatchBytes+1)); !errors.As(err, &me) || me.Code != CodeTooLarge {
		t.Fatalf("oversized: %v", err)
	}
	var out core.Output
	if err := inst.Join(core.GroupSpec{Config: authTestConfig(core.AuthHMAC, "a", "g", []string{"a", "b"})}, 1, &out); err != nil {
		t.Fatal(err)
	}
	if inst.Err() != nil {
		t.Fatal(inst.Err())
	}
}

// TestSandboxRestoreKeepsDrain: a drain lives in the instance's memory, not
// in the persisted state; the instance that replaces a trapped one is
// drained again, so a trap cannot make a drained agent campaign.
func TestSandboxRestoreKeepsDrain(t *testing.T) {
	ctx := context.Background()
	path, err := testwasm.Module(testwasm.TrapTestTag)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRuntime(ctx, Config{WasmPath: path, CacheDir: testwasm.CacheDir(), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	eng, _ := sandboxEngine(t, r)
	campaign := func(now int64) []core.Event {
		var out core.Output
		if err := eng.Step(&core.Input{Now: now, Commands: []core.Command{{Kind: core.CmdCampaign, Group: "g", Request: 9}}}, &out); err != nil {
			t.Fatal(err)
		}
		return out.Events
	}
	var out core.Output
	if err := eng.Step(&core.Input{Now: 20, Commands: []core.Command{{Kind: core.CmdDrain, Group: "g"}}}, &out); err != nil {
		t.Fatal(err)
	}
	if evs := campaign(21); len(evs) != 1 || !strings.Contains(evs[0].Reason, "drained") {
		t.Fatalf("campaign while drained: %+v", evs)
	}
	eng.mu.Lock()
	inst := eng.inst
	_, err = inst.call("test_trap", inst.mod.ExportedFunction("ec_test_trap"), 1)
	eng.mu.Unlock()
	if !errors.Is(err, ErrTrap) {
		t.Fatal(err)
	}
	var te *TrapError
	if err := eng.Step(&core.Input{Now: 30}, &out); !errors.As(err, &te) || !te.Restored {
		t.Fatalf("step after the trap: %v", err)
	}
	if evs := campaign(31); len(evs) != 1 || !strings.Contains(evs[0].Reason, "drained") {
		t.Fatalf("campaign after the restore: %+v (the drain was lost)", evs)
	}
	if err := eng.Step(&core.Input{Now: 40, Commands: []core.Command{{Kind: core.CmdUndrain, Group: "g"}}}, &out); err != nil {
		t.Fatal(err)
	}
	if evs := campaign(41); len(evs) != 0 {
		t.Fatalf("campaign once undrained: %+v", evs)
	}
}

// TestSandboxRestoreKeepsProclaimedValue: a proclaimed leader value lives
// in the instance's memory; the instance that replaces a trapped one
// announces the latest value, not the one the group joined with.
func TestSandboxRestoreKeepsProclaimedValue(t *testing.T) {
	ctx := context.Background()
	path, err := testwasm.Module(testwasm.TrapTestTag)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRuntime(ctx, Config{WasmPath: path, CacheDir: testwasm.CacheDir(), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	eng, err := r.NewEngine(ctx, EngineConfig{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	var out core.Output
	cfg := core.Config{ID: "a", Group: "g", Members: []string{"a"}, Value: "v1"}
	if err := eng.Step(&core.Input{Now: 10, Join: []core.GroupSpec{{Config: cfg}}}, &out); err != nil {
		t.Fatal(err)
	}
	// lead steps until "a" leads and returns its status; at is the time
	// of that step.
	var at int64
	lead := func(from int64) core.Status {
		for now := from; now < from+10_000; now += 100 {
			if err := eng.Step(&core.Input{Now: now}, &out); err != nil {
				t.Fatal(err)
			}
			if st, ok, _ := eng.Status("g"); ok && st.Role == core.RoleLeader {
				at = now
				return st
			}
		}
		t.Fatal("a never led")
		return core.Status{}
	}
	if st := lead(20); st.Value != "v1" {
		t.Fatalf("value %q, want v1", st.Value)
	}
	// Proclaimed while it leads: a leader not stepped until after its
	// lease ended steps down before any command of that step.
	if err := eng.Step(&core.Input{Now: at + 1, Commands: []core.Command{{Kind: core.CmdProclaim, Group: "g", Value: "v2", Request: 3}}}, &out); err != nil {
		t.Fatal(err)
	}
	if rejected(out.Events, 3) {
		t.Fatalf("proclaim refused: %+v", out.Events)
	}
	eng.mu.Lock()
	inst := eng.inst
	_, err = inst.call("test_trap", inst.mod.ExportedFunction("ec_test_trap"), 1)
	eng.mu.Unlock()
	if !errors.Is(err, ErrTrap) {
		t.Fatal(err)
	}
	var te *TrapError
	if err := eng.Step(&core.Input{Now: at + 100}, &out); !errors.As(err, &te) || !te.Restored {
		t.Fatalf("step after the trap: %v", err)
	}
	if st := lead(at + 200); st.Value != "v2" {
		t.Fatalf("value after the restore %q, want v2 (the proclaim was lost)", st.Value)
	}
}
