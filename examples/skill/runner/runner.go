package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Sandbox limits of every instance.
const (
	memoryLimitPages = 256 // 16 MiB of linear memory
	callTimeout      = time.Second
	noTimer          = 1 << 31 // an hd_* result: no timer pending
)

// Event is what the module hands to the imported event() (JSON).
type Event struct {
	Kind       string `json:"kind"`
	Group      string `json:"group"`
	Term       uint64 `json:"term"`
	Leader     string `json:"leader,omitempty"`
	LeaseUntil int64  `json:"lease_until,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Module is the host-driven build of electcore.wasm compiled once, with the
// only imports it is granted: WASI (fake clocks, deterministic random, no
// files, arguments, environment or network) and the five "electcore"
// functions, which route to the Runner that made the call.
type Module struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
}

type runnerKey struct{}

func runnerOf(ctx context.Context) *Runner { return ctx.Value(runnerKey{}).(*Runner) }

// Load compiles the host-driven module (built with -tags electcore_hostdriven).
func Load(ctx context.Context, wasm []byte) (*Module, error) {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithMemoryLimitPages(memoryLimitPages).
		WithCloseOnContextDone(true))
	m := &Module{rt: rt}
	var err error
	if m.compiled, err = rt.CompileModule(ctx, wasm); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	if _, ok := m.compiled.ExportedFunctions()["hd_tick"]; !ok {
		rt.Close(ctx)
		return nil, errors.New("not the host-driven build: rebuild with -tags electcore_hostdriven")
	}
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	ec := rt.NewHostModuleBuilder("electcore")
	fn := func(name string, f api.GoModuleFunc, params, results []api.ValueType) {
		ec.NewFunctionBuilder().WithGoModuleFunction(f, params, results).Export(name)
	}
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	fn("now", func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(runnerOf(ctx).clock.NowMs())
	}, nil, []api.ValueType{i64})
	fn("publish", func(ctx context.Context, m api.Module, s []uint64) {
		r := runnerOf(ctx)
		r.outbox = append(r.outbox, transport.Message{Topic: string(read(m, s[0], s[1])), Payload: read(m, s[2], s[3])})
		s[0] = 0
	}, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32})
	fn("persist", func(ctx context.Context, m api.Module, s []uint64) {
		r := runnerOf(ctx)
		group, state := string(read(m, s[0], s[1])), read(m, s[2], s[3])
		s[0] = 0
		if err := r.store.Save(stateName(r.cfg.ID, group), state); err != nil {
			r.logger.Error("persist failed: the group's messages are held until a save succeeds", "err", err)
			s[0] = 1
		}
	}, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32})
	fn("event", func(ctx context.Context, m api.Module, s []uint64) {
		r := runnerOf(ctx)
		var ev Event
		if err := json.Unmarshal(read(m, s[0], s[1]), &ev); err == nil {
			r.events = append(r.events, ev)
		}
	}, []api.ValueType{i32, i32}, nil)
	fn("log", func(ctx context.Context, m api.Module, s []uint64) {
		runnerOf(ctx).logger.Log(ctx, slog.Level(4*(int32(s[0])-1)), string(read(m, s[1], s[2])))
	}, []api.ValueType{i32, i32, i32}, nil)
	if _, err := ec.Instantiate(ctx); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return m, nil
}

// Close releases the module and every instance.
func (m *Module) Close(ctx context.Context) error { return m.rt.Close(ctx) }

func read(m api.Module, ptr, n uint64) []byte {
	b, ok := m.Memory().Read(uint32(ptr), uint32(n))
	if !ok {
		panic(fmt.Sprintf("read of %d bytes at %#x outside memory", n, ptr))
	}
	return append([]byte(nil), b...)
}

// stateName is where a member's group state lives in the StateStore.
func stateName(id, group string) string { return id + "=" + group }

// Store is what the runner persists to (statestore.Store fits).
type Store interface {
	Save(name string, data []byte) error
	Load(name string) ([]byte, error)
}

// Runner is one member of one group, in host-driven mode: a single goroutine
// owns the module instance and calls hd_join once, hd_deliver per message,
// hd_command per command and hd_tick when the returned delay is up. The module
// calls back now, persist (durably, inside the call), publish (queued and sent
// after the call returns, so always after persist), event and log.
type Runner struct {
	mod    *Module
	cfg    core.Config
	tr     transport.Transport
	store  Store
	clock  host.Clock
	logger *slog.Logger
	onEv   func(Event)
	// leading: the last became-leader not followed by stepped-down (so
	// that shutdown resigns only a leadership it holds).
	leading bool

	inst   api.Module
	outbox []transport.Message
	events []Event

	inbox chan transport.Message
	cmds  chan command
	done  chan struct{}
	traps int
}

type command struct {
	kind   core.CommandKind
	target string
	done   chan error
}

// Options configures a Runner.
type Options struct {
	Transport transport.Transport
	Store     Store
	Clock     host.Clock // nil: a real monotonic clock
	Logger    *slog.Logger
	OnEvent   func(Event) // called from the runner's goroutine
}

// Start joins cfg.Group and runs until ctx ends (then it resigns if leading,
// and leaves).
func (m *Module) Start(ctx context.Context, cfg core.Config, o Options) (*Runner, error) {
	r := &Runner{mod: m, cfg: cfg, tr: o.Transport, store: o.Store, clock: o.Clock, logger: o.Logger, onEv: o.OnEvent,
		inbox: make(chan transport.Message, 1024), cmds: make(chan command), done: make(chan struct{})}
	if r.clock == nil {
		r.clock = host.NewRealClock()
	}
	if r.logger == nil {
		r.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if r.onEv == nil {
		r.onEv = func(Event) {}
	}
	if err := r.tr.Subscribe(ctx, core.Topic(cfg.Group), func(msg transport.Message) {
		select {
		case r.inbox <- msg:
		default: // overloaded: drop, as a lossy bus would
		}
	}); err != nil {
		return nil, err
	}
	delay, err := r.instantiateAndJoin(ctx)
	if err != nil {
		return nil, err
	}
	go r.loop(ctx, delay)
	return r, nil
}

// instantiateAndJoin makes a fresh instance and joins from the persisted state.
func (r *Runner) instantiateAndJoin(ctx context.Context) (int64, error) {
	// No WithFS, WithEnv, WithArgs, WithSysWalltime, WithRandSource: the
	// module sees no files, no environment, fake clocks and a fixed random
	// stream. Its only real inputs are the imported functions.
	inst, err := r.mod.rt.InstantiateModule(ctx, r.mod.compiled, wazero.NewModuleConfig().
		WithName("").WithStartFunctions("_initialize"))
	if err != nil {
		return 0, err
	}
	r.inst = inst
	cfgb, err := abi.MarshalConfig(nil, &r.cfg)
	if err != nil {
		return 0, err
	}
	state, err := r.store.Load(stateName(r.cfg.ID, r.cfg.Group))
	if err != nil && !errors.Is(err, statestore.ErrNotFound) {
		return 0, fmt.Errorf("state: %w", err)
	}
	return r.call(ctx, "hd_join", append(cfgb, state...), uint64(len(cfgb)), uint64(len(state)))
}

// call writes in to the module's input buffer, calls an hd_* export under the
// call deadline, then sends the queued publishes and hands over the events.
func (r *Runner) call(ctx context.Context, name string, in []byte, args ...uint64) (int64, error) {
	cctx, cancel := context.WithTimeout(context.WithValue(ctx, runnerKey{}, r), callTimeout)
	defer cancel()
	r.outbox, r.events = r.outbox[:0], r.events[:0]
	if len(in) > 0 {
		res, err := r.inst.ExportedFunction("ec_input").Call(cctx, uint64(len(in)))
		if err != nil {
			return 0, err
		}
		if res[0] == 0 || !r.inst.Memory().Write(uint32(res[0]), in) {
			return 0, fmt.Errorf("%s: input of %d bytes refused", name, len(in))
		}
	}
	res, err := r.inst.ExportedFunction(name).Call(cctx, args...)
	if err != nil {
		return 0, err // a trap
	}
	for _, m := range r.outbox {
		if err := r.tr.Publish(ctx, m.Topic, m.Payload); err != nil {
			r.logger.Warn("publish", "err", err)
		}
	}
	for _, ev := range r.events {
		switch ev.Kind {
		case core.EventBecameLeader.String():
			r.leading = true
		case core.EventSteppedDown.String(), core.EventLeft.String():
			r.leading = false
		}
		r.onEv(ev)
	}
	if d := int64(res[0]); d < 0 {
		return 0, &moduleError{code: -d, msg: r.lastError(cctx)}
	}
	return int64(res[0]), nil
}

type moduleError struct {
	code int64
	msg  string
}

func (e *moduleError) Error() string { return fmt.Sprintf("electcore error %d: %s", e.code, e.msg) }

func (r *Runner) lastError(ctx context.Context) string {
	res, err := r.inst.ExportedFunction("ec_error").Call(ctx)
	if err != nil || res[0] == 0 {
		return "?"
	}
	return string(read(r.inst, res[0]>>32, res[0]&0xffffffff))
}

func (r *Runner) loop(ctx context.Context, delay int64) {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	arm := func(d int64) {
		timer.Stop()
		if d < noTimer {
			timer.Reset(time.Duration(d) * time.Millisecond)
		}
	}
	arm(delay)
	// do runs one call; a trap replaces the instance and rejoins from the
	// persisted state (what the failed call was doing is lost).
	do := func(name string, in []byte, args ...uint64) error {
		d, err := r.call(ctx, name, in, args...)
		var me *moduleError
		switch {
		case err == nil:
			arm(d)
		case errors.As(err, &me):
			arm(100) // the module refused the call: try again soon
			return err
		case ctx.Err() == nil:
			r.traps++
			r.logger.Error("wasm trap: re-instantiating from persisted state", "err", err)
			r.inst.Close(context.Background())
			if d, err = r.instantiateAndJoin(ctx); err == nil {
				arm(d)
			}
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			// Resign if leading, then leave.
			sctx := context.WithoutCancel(ctx)
			g := []byte(r.cfg.Group)
			kinds := []core.CommandKind{core.CmdLeave}
			if r.leading {
				kinds = []core.CommandKind{core.CmdResign, core.CmdLeave}
			}
			for _, k := range kinds {
				if _, err := r.call(sctx, "hd_command", g, uint64(k), uint64(len(g)), 0); err != nil && !isModuleError(err) {
					// A trap: the instance is gone, and with it the group.
					r.logger.Error("shutdown: wasm trap", "command", k.String(), "err", err)
					break
				}
			}
			r.inst.Close(sctx)
			return
		case m := <-r.inbox:
			if len(m.Topic)+len(m.Payload) > core.MaxBatchBytes {
				continue
			}
			do("hd_deliver", append([]byte(m.Topic), m.Payload...), uint64(len(m.Topic)), uint64(len(m.Payload)))
		case c := <-r.cmds:
			in := append([]byte(r.cfg.Group), c.target...)
			c.done <- do("hd_command", in, uint64(c.kind), uint64(len(r.cfg.Group)), uint64(len(c.target)))
		case <-timer.C:
			do("hd_tick", nil)
		}
	}
}

func isModuleError(err error) bool {
	var me *moduleError
	return errors.As(err, &me)
}

// Command applies a command (resign, transfer to target, campaign).
func (r *Runner) Command(ctx context.Context, kind core.CommandKind, target string) error {
	c := command{kind: kind, target: target, done: make(chan error, 1)}
	select {
	case r.cmds <- c:
	case <-r.done:
		return errors.New("runner stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-c.done
}

// Done is closed once the runner has resigned, left and stopped.
func (r *Runner) Done() <-chan struct{} { return r.done }

// Traps counts instances replaced after a trap.
func (r *Runner) Traps() int { return r.traps }
