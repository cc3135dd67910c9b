package wasmhost

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

// EngineConfig configures Runtime.NewEngine.
type EngineConfig struct {
	// OnTrap is called (synchronously, inside Step) after a trap, once the
	// instance has been replaced (err is the *TrapError).
	OnTrap func(err error)
	// Logger: nil means the runtime's.
	Logger *slog.Logger
}

// Engine is a self-healing Instance: it has core.Engine's Step and Status,
// hosts any number of groups, and when the module traps it closes the
// instance, instantiates a new one and re-joins every group with the last
// state the core asked to persist (the host persists every Output.Persist
// before publishing, so that state is what the rest of the swarm may have
// seen; nothing newer ever left the node). It is safe for concurrent use
// (calls are serialised) and satisfies sim.Stepper.
type Engine struct {
	rt     *Runtime
	cfg    EngineConfig
	logger *slog.Logger

	mu      sync.Mutex
	inst    *Instance
	specs   map[string]*core.GroupSpec // joined groups, State = last persisted
	order   []string                   // join order, for a deterministic restore
	drained map[string]bool            // groups drained (core.CmdDrain): drained again on restore
	now     int64
	wall    int64
	closed  bool

	traps atomic.Uint64
	steps atomic.Uint64
}

// NewEngine instantiates the module and returns an engine with no groups.
func (r *Runtime) NewEngine(ctx context.Context, cfg EngineConfig) (*Engine, error) {
	inst, err := r.NewInstance(ctx)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = r.logger
	}
	return &Engine{rt: r, cfg: cfg, logger: logger, inst: inst, specs: map[string]*core.GroupSpec{}}, nil
}

// Step runs one batch, appending the output to out like core.Engine.Step.
// If the module traps, the batch is lost (its inbound messages count as
// lost on the network; its commands did not happen), the instance is
// restored, out receives the restore's output (joined events and the next
// WakeAt) and Step returns the *TrapError with Restored set: apply out and
// carry on. Any other error means out is unchanged.
func (e *Engine) Step(in *core.Input, out *core.Output) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	e.now, e.wall = max(e.now, in.Now), in.Wall
	if e.inst == nil {
		if err := e.restoreLocked(out); err != nil {
			return err
		}
	}
	n := len(out.Events)
	np := len(out.Persist)
	err := e.inst.Step(in, out)
	if err == nil {
		e.steps.Add(1)
		e.track(in, out.Persist[np:], out.Events[n:])
		return nil
	}
	if !isTrap(err) {
		return err
	}
	return e.recoverLocked(err, out)
}

// recoverLocked replaces the trapped instance and reports the trap.
func (e *Engine) recoverLocked(err error, out *core.Output) error {
	e.traps.Add(1)
	t, _ := asTrap(err)
	_ = e.inst.Close(context.Background())
	e.inst = nil
	rerr := e.restoreLocked(out)
	if rerr == nil {
		t.Restored = true
	}
	e.logger.Error("electcore module trapped; instance replaced",
		"op", t.Op, "err", t.Err, "restored", t.Restored, "groups", len(e.order), "stderr", t.Stderr, "restore_err", rerr)
	if e.cfg.OnTrap != nil {
		e.cfg.OnTrap(t)
	}
	return t
}

// restoreBatchBytes bounds one batch of a restore: the groups are re-joined
// in batches of about this many encoded bytes, so a restore needs no more
// memory than the joins it repeats (one batch of every group of an instance
// that ran out of memory would run out of memory too).
const restoreBatchBytes = 64 << 10

// restoreLocked instantiates a fresh module and re-joins every group with its
// last persisted state, in join order, at the last time seen.
func (e *Engine) restoreLocked(out *core.Output) error {
	inst, err := e.rt.NewInstance(context.Background())
	if err != nil {
		return err
	}
	e.inst = inst
	if len(e.order) == 0 {
		return nil
	}
	n := len(out.Events)
	in := core.Input{Now: e.now, Wall: e.wall}
	size := 0
	for k, g := range e.order {
		spec := e.specs[g]
		in.Join = append(in.Join, *spec)
		size += abi.SpecSize(spec)
		if k < len(e.order)-1 && size+abi.SpecSize(e.specs[e.order[k+1]]) <= restoreBatchBytes {
			continue
		}
		np := len(out.Persist)
		if err := inst.Step(&in, out); err != nil {
			_ = inst.Close(context.Background())
			e.inst = nil
			return err
		}
		out.Persist = append(out.Persist[:np], e.mustPersist(out.Persist[np:])...)
		in.Join, size = in.Join[:0], 0
	}
	// A group the core now refuses (it cannot be: it was accepted before)
	// is dropped from the restore list so the others keep working.
	for _, ev := range out.Events[n:] {
		if ev.Kind == core.EventRejected && e.specs[ev.Group] != nil {
			e.logger.Error("group refused on restore", "group", ev.Group, "reason", ev.Reason)
			e.forget(ev.Group)
		}
	}
	// A drain is the operator's, held in memory by the core: the new
	// instance gets it again before anything else can reach it.
	in = core.Input{Now: e.now, Wall: e.wall}
	for _, g := range e.order {
		if e.drained[g] {
			in.Commands = append(in.Commands, core.Command{Kind: core.CmdDrain, Group: g})
		}
	}
	if len(in.Commands) > 0 {
		if err := inst.Step(&in, out); err != nil {
			_ = inst.Close(context.Background())
			e.inst = nil
			return err
		}
	}
	return nil
}

// mustPersist records the states a restore's re-joins ask to persist (every
// join raises the group's epoch: the next restore starts from there) and
// returns those the host must save before the group publishes again: not
// those of groups without authentication that differ from the state last
// saved only in the epoch, which such a group carries along but never
// sends. Saving them cost a synced write per group for nothing, in one
// go: an agent with a disk store and thousands of groups spent longer
// than an election timeout on them after a trap, and every group it then
// stepped found its campaign overdue and ran it, although every leader was
// alive (TestRestoreAfterTrapKeepsFollowing). With authentication the new
// epoch must be durable before anything signed with it is sent, so those
// are saved.
func (e *Engine) mustPersist(ps []core.GroupState) []core.GroupState {
	keep := ps[:0]
	for _, p := range ps {
		s := e.specs[p.Group]
		if s == nil {
			keep = append(keep, p) // not ours to judge
			continue
		}
		if a := s.Config.Auth; a != core.AuthOff && a != "" || !sameButEpoch(p, s.State) {
			keep = append(keep, p)
		}
		s.State = p
	}
	return keep
}

// sameButEpoch reports whether a and b differ at most in their epochs.
func sameButEpoch(a, b core.GroupState) bool {
	return a.Group == b.Group && a.Term == b.Term && a.Vote == b.Vote && a.ConfTerm == b.ConfTerm &&
		a.ConfIndex == b.ConfIndex && slices.Equal(a.Members, b.Members) && len(a.Keys) == 0 && len(b.Keys) == 0
}

// track records joins, leaves and persisted states from a successful step.
func (e *Engine) track(in *core.Input, persist []core.GroupState, events []core.Event) {
	for _, ev := range events {
		if ev.Kind != core.EventJoined {
			continue
		}
		for k := range in.Join {
			if in.Join[k].Config.Group == ev.Group {
				spec := in.Join[k]
				spec.Config.Members = slices.Clone(spec.Config.Members)
				if spec.State.Group == "" {
					spec.State.Group = ev.Group
				}
				if e.specs[ev.Group] == nil {
					e.order = append(e.order, ev.Group)
				}
				e.specs[ev.Group] = &spec
				break
			}
		}
	}
	for _, p := range persist {
		if s := e.specs[p.Group]; s != nil {
			s.State = p
		}
	}
	for _, c := range in.Commands {
		if c.Kind == core.CmdProclaim && e.specs[c.Group] != nil && !rejected(events, c.Request) {
			e.specs[c.Group].Config.Value = c.Value // a restored leader announces the latest
		}
		if (c.Kind == core.CmdDrain || c.Kind == core.CmdUndrain) && e.specs[c.Group] != nil && !rejected(events, c.Request) {
			if e.drained == nil {
				e.drained = map[string]bool{}
			}
			e.drained[c.Group] = c.Kind == core.CmdDrain
		}
	}
	for _, ev := range events {
		if ev.Kind == core.EventLeft {
			e.forget(ev.Group)
		}
	}
}

// rejected reports whether events refuse the request req (0: none).
func rejected(events []core.Event, req uint64) bool {
	for _, ev := range events {
		if req != 0 && ev.Kind == core.EventRejected && ev.Request == req {
			return true
		}
	}
	return false
}

func (e *Engine) forget(group string) {
	delete(e.drained, group)
	delete(e.specs, group)
	e.order = slices.DeleteFunc(e.order, func(g string) bool { return g == group })
}

// Status returns a snapshot of group (ok false if not joined).
func (e *Engine) Status(group string) (core.Status, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return core.Status{}, false, ErrClosed
	}
	if e.inst == nil {
		var out core.Output
		if err := e.restoreLocked(&out); err != nil {
			return core.Status{}, false, err
		}
	}
	st, ok, err := e.inst.Status(group)
	if isTrap(err) {
		var out core.Output
		_ = e.recoverLocked(err, &out)
		return core.Status{}, false, err
	}
	return st, ok, err
}

// Groups lists the joined groups in join order.
func (e *Engine) Groups() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.order)
}

// PersistedState returns the last state the core asked to persist for group.
func (e *Engine) PersistedState(group string) (core.GroupState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.specs[group]; s != nil {
		return s.State, true
	}
	return core.GroupState{}, false
}

// Traps counts the traps recovered from; Steps the successful steps.
func (e *Engine) Traps() uint64 { return e.traps.Load() }
func (e *Engine) Steps() uint64 { return e.steps.Load() }

// MemoryBytes is the current instance's linear memory size.
func (e *Engine) MemoryBytes() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inst == nil {
		return 0
	}
	return e.inst.MemoryBytes()
}

// Close closes the instance.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.inst != nil {
		return e.inst.Close(ctx)
	}
	return nil
}

// InjectTrap makes the next call into the module exceed its deadline (a real
// trap: the call stops at its first loop, as when the deadline passes). For
// tests, here and in package host.
func (e *Engine) InjectTrap() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inst != nil {
		e.inst.interrupt(ErrDeadline)
	}
}

// TestHeap reads the module's heap statistics through the test build's
// ec_test_heap export (what as there; ok false if the module has no such
// export). For tests and benchmarks, here and in package host.
func (e *Engine) TestHeap(what int32) (v uint64, ok bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inst == nil {
		return 0, false, nil
	}
	f := e.inst.mod.ExportedFunction("ec_test_heap")
	if f == nil {
		return 0, false, nil
	}
	v, err = e.inst.call("test_heap", f, uint64(what), 0)
	return v, err == nil, err
}
