package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/electcore/electcore/internal/engineerr"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/internal/fuel"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// Module error codes (negative results of the raw exports; see wasm/ABI.md).
const (
	CodeTooLarge = 1
	CodeDecode   = 2
	CodeNotFound = 3
	CodePanic    = 4
	CodeRejected = 5
	CodeEncode   = 6
	CodePersist  = 7
)

// ModuleError is an error the module reported (it did not trap).
type ModuleError struct {
	Op   string
	Code int
	Msg  string
}

func (e *ModuleError) Error() string {
	return fmt.Sprintf("electcore module: %s: %s (code %d)", e.Op, e.Msg, e.Code)
}

// ErrTrap matches (errors.Is) every TrapError.
var ErrTrap = engineerr.ErrTrap

// ErrDeadline is the cause of a trap raised by the call deadline.
var ErrDeadline = errors.New("call deadline exceeded")

// ErrClosed is returned by an instance, engine or agent used after Close.
var ErrClosed = engineerr.ErrClosed

// TrapError reports a call that trapped (an unrecovered fault, out of memory,
// the call deadline, or a recovered panic, which leaves the core suspect).
// The instance that trapped is closed. Restored is true when an Engine
// replaced it with a new instance restored from the persisted state.
type TrapError struct {
	Op       string
	Err      error
	Stderr   string // what the module wrote to stderr, if anything
	Restored bool
}

func (e *TrapError) Error() string {
	s := fmt.Sprintf("electcore module trapped in %s: %v", e.Op, e.Err)
	if e.Restored {
		s += " (instance replaced and restored from persisted state)"
	}
	return s
}
func (e *TrapError) Unwrap() error { return e.Err }
func (e *TrapError) Is(target error) bool {
	return target == ErrTrap || e.Restored && target == engineerr.ErrReplaced
}
func isTrap(err error) bool               { return errors.Is(err, ErrTrap) }
func asTrap(err error) (*TrapError, bool) { var t *TrapError; ok := errors.As(err, &t); return t, ok }

// Instance is one module instance hosting one core engine (any number of
// groups), driven through the raw ABI. Its methods serialise calls (an
// instance is never entered concurrently). After a trap it is closed and
// every call returns the TrapError; use Engine for automatic recovery.
type Instance struct {
	rt      *Runtime
	mu      sync.Mutex
	mod     api.Module
	mem     api.Memory
	fInput  api.Function
	fStep   api.Function
	fJoin   api.Function
	fStatus api.Function
	fError  api.Function
	fReset  api.Function
	fLimit  api.Function // ec_memory_limit, if the module has it
	stack   []uint64

	// The bound of linear memory (memoryBound) for the groups joined (as
	// the module's events count them), enforced by memory.
	groups int
	bound  uint64
	memory *boundedMemory

	inPtr, inCap uint32
	buf          []byte // host-side encode buffer
	scratch      core.Output

	ctx     context.Context // carries the instance (host-driven imports)
	timeout time.Duration
	stderr  *capBuffer
	dead    error // the trap that killed this instance
	hd      atomic.Pointer[HostFuncs]
	fuel    api.MutableGlobal     // the instrumentation's fuel global (internal/fuel)
	fired   atomic.Pointer[error] // why the instance was interrupted
	calls   uint64                // calls started
	// The call the last check saw, and when it saw it first.
	checkCall  uint64
	checkStart time.Time
}

// NewInstance instantiates the module: runs _initialize, grants nothing but
// WASI's fake clocks and deterministic random source and, as its only
// environment variable, GOMEMLIMIT (goMemLimit), and bounds memory
// (memoryBound: the bound grows with the groups the instance joins).
func (r *Runtime) NewInstance(ctx context.Context) (*Instance, error) {
	i := &Instance{rt: r, timeout: r.cfg.CallTimeout, stderr: &capBuffer{max: 8 << 10}, stack: make([]uint64, 4)}
	i.ctx = context.WithValue(context.Background(), instanceKey{}, i)
	i.bound = memoryBound(r.cfg.MemoryLimitPages, 0)
	i.memory = newBoundedMemory(i.bound)
	ctx = experimental.WithMemoryAllocator(ctx, i.memory)
	mc := wazero.NewModuleConfig().
		WithName("").
		WithEnv("GOMEMLIMIT", strconv.FormatUint(goMemLimit(i.bound), 10)).
		WithStartFunctions("_initialize").
		WithStderr(i.stderr)
	mod, err := r.wr.InstantiateModule(ctx, r.compiled, mc)
	if err != nil {
		return nil, fmt.Errorf("host: instantiating %s: %w%s", r.describe(), err, i.stderr.suffix())
	}
	fuel, ok := mod.ExportedGlobal(fuel.Export).(api.MutableGlobal)
	if !ok {
		mod.Close(ctx)
		return nil, fmt.Errorf("host: instantiating %s: no fuel global", r.describe())
	}
	i.mod, i.mem, i.fuel = mod, mod.Memory(), fuel
	i.fInput = mod.ExportedFunction("ec_input")
	i.fStep = mod.ExportedFunction("ec_step")
	i.fJoin = mod.ExportedFunction("ec_join")
	i.fStatus = mod.ExportedFunction("ec_status")
	i.fError = mod.ExportedFunction("ec_error")
	i.fReset = mod.ExportedFunction("ec_reset")
	i.fLimit = mod.ExportedFunction("ec_memory_limit") // nil in modules before it
	return i, nil
}

type instanceKey struct{}

// call runs f with the stack, under the call deadline (enforced by check).
// A failure of the call itself is a trap: the instance is closed.
func (i *Instance) call(op string, f api.Function, args ...uint64) (uint64, error) {
	if i.dead != nil {
		return 0, i.dead
	}
	i.stack = i.stack[:max(len(args), 1)]
	copy(i.stack, args)
	i.calls++
	err := f.CallWithStack(i.ctx, i.stack)
	if c := i.fired.Load(); c != nil {
		// The deadline or an interrupt stopped the call, or came just as
		// it returned: unusable either way.
		return 0, i.kill(op, fmt.Errorf("%w (limit %v): %v", *c, i.timeout, err))
	}
	if err != nil {
		return 0, i.kill(op, err)
	}
	return i.stack[0], nil
}

// check runs, on the calling goroutine, every fuel.PerCheck loop iterations
// of a call (internal/fuel): it traps the call if it was interrupted or has
// run longer than the deadline. A call's first check starts its clock (the
// iterations before it take well under a millisecond), so calls pay no
// clock reads.
func (i *Instance) check() {
	if c := i.fired.Load(); c != nil {
		panic(*c)
	}
	if i.checkCall != i.calls {
		i.checkCall, i.checkStart = i.calls, time.Now()
		return
	}
	if time.Since(i.checkStart) > i.timeout {
		i.interrupt(ErrDeadline)
		panic(ErrDeadline)
	}
}

// interrupt makes the running call, or else the next one, trap at its next
// loop iteration. Safe from any goroutine.
func (i *Instance) interrupt(cause error) {
	if i.fired.CompareAndSwap(nil, &cause) {
		i.fuel.Set(1)
	}
}

func (i *Instance) kill(op string, err error) error {
	t := &TrapError{Op: op, Err: err, Stderr: i.stderr.String()}
	i.dead = t
	_ = i.mod.Close(context.Background())
	return t
}

// write copies b into the module's input buffer, growing it if needed.
func (i *Instance) write(op string, b []byte) error {
	if len(b) > core.MaxBatchBytes {
		return &ModuleError{Op: op, Code: CodeTooLarge, Msg: fmt.Sprintf("input of %d bytes exceeds %d", len(b), core.MaxBatchBytes)}
	}
	if uint32(len(b)) > i.inCap || i.inPtr == 0 {
		want := uint32(max(len(b), 64<<10))
		ptr, err := i.call("ec_input", i.fInput, uint64(want))
		if err != nil {
			return err
		}
		if ptr == 0 {
			return &ModuleError{Op: op, Code: CodeTooLarge, Msg: "ec_input refused the size"}
		}
		i.inPtr, i.inCap = uint32(ptr), want
	}
	if !i.mem.Write(i.inPtr, b) {
		return i.kill(op, fmt.Errorf("input buffer at %#x+%d outside memory", i.inPtr, len(b)))
	}
	return nil
}

// result interprets a raw export's packed result: the bytes it points to
// (a view into module memory, valid until the next call) or the error.
func (i *Instance) result(op string, r uint64) ([]byte, error) {
	if int64(r) < 0 {
		code := int(-int64(r))
		msg := "unknown error"
		if p, err := i.call("ec_error", i.fError); err == nil && p != 0 {
			if b, ok := i.mem.Read(uint32(p>>32), uint32(p)); ok {
				msg = string(b)
			}
		}
		me := &ModuleError{Op: op, Code: code, Msg: msg}
		if code == CodePanic {
			return nil, i.kill(op, me)
		}
		return nil, me
	}
	b, ok := i.mem.Read(uint32(r>>32), uint32(r))
	if !ok {
		return nil, i.kill(op, fmt.Errorf("result %#x outside memory", r))
	}
	return b, nil
}

// StepBytes runs one msgp core.Input batch and returns the msgp core.Output,
// copied out of the module.
func (i *Instance) StepBytes(in []byte) ([]byte, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	b, err := i.stepRaw("step", i.fStep, in)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

func (i *Instance) stepRaw(op string, f api.Function, in []byte) ([]byte, error) {
	// The module checks the batch (abi.DecodeInput); checking it here too
	// cost a second walk of every batch.
	if err := i.write(op, in); err != nil {
		return nil, err
	}
	r, err := i.call(op, f, uint64(len(in)))
	if err != nil {
		return nil, err
	}
	return i.result(op, r)
}

// Step runs one batch through the module, like core.Engine.Step: what it
// produced is appended to out (reset it first to reuse its buffers). It
// satisfies sim.Stepper.
func (i *Instance) Step(in *core.Input, out *core.Output) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.stepLocked("step", i.fStep, in, out)
}

func (i *Instance) stepLocked(op string, f api.Function, in *core.Input, out *core.Output) error {
	var err error
	if i.buf, err = abi.MarshalInput(i.buf[:0], in); err != nil {
		return fmt.Errorf("host: encoding input: %w", err)
	}
	if len(in.Join) > 0 {
		// Room for every group the batch may add, before the module
		// allocates for them.
		if err := i.raiseBound(i.groups + len(in.Join)); err != nil {
			return err
		}
	}
	b, err := i.stepRaw(op, f, i.buf)
	if err != nil {
		return err
	}
	n := len(out.Events)
	if err := decodeOutput(b, out, &i.scratch); err != nil {
		return err
	}
	for _, ev := range out.Events[n:] {
		switch ev.Kind {
		case core.EventJoined:
			i.groups++
		case core.EventLeft:
			i.groups--
		}
	}
	return nil
}

// raiseBound raises the bound of linear memory to memoryBound for groups
// (it never lowers it: memory does not shrink) and the module's soft limit
// with it.
func (i *Instance) raiseBound(groups int) error {
	b := memoryBound(i.rt.cfg.MemoryLimitPages, groups)
	if b <= i.bound {
		return nil
	}
	i.bound = b
	i.memory.limit.Store(b)
	if i.fLimit == nil {
		return nil
	}
	_, err := i.call("memory_limit", i.fLimit, goMemLimit(b))
	return err
}

// MemoryBound is the bound of the instance's linear memory in bytes: it
// grows with the groups joined (memoryBound).
func (i *Instance) MemoryBound() uint64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.bound
}

// decodeOutput decodes b into out, appending like core.Engine.Step does.
// Payload buffers are never reused: a caller may still hold the previous
// batch's messages.
func decodeOutput(b []byte, out, scratch *core.Output) error {
	dst := out
	if len(out.Persist)+len(out.Publishes)+len(out.Events) > 0 {
		dst = scratch
		dst.Reset()
	}
	clear(dst.Publishes[:cap(dst.Publishes)])
	if _, err := abi.UnmarshalOutput(b, dst); err != nil {
		return fmt.Errorf("host: decoding module output: %w", err)
	}
	if dst != out {
		out.Persist = append(out.Persist, dst.Persist...)
		out.Publishes = append(out.Publishes, dst.Publishes...)
		out.Events = append(out.Events, dst.Events...)
		out.WakeAt = dst.WakeAt
		clear(dst.Publishes)
	}
	return nil
}

// Join joins one group (spec carries the persisted state; a zero State for a
// first start) at time now. It fails, changing nothing, if the core rejects
// the group.
func (i *Instance) Join(spec core.GroupSpec, now int64, out *core.Output) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	in := core.Input{Now: now, Join: []core.GroupSpec{spec}}
	return i.stepLocked("join", i.fJoin, &in, out)
}

// Status returns a snapshot of group; ok is false if it is not joined.
func (i *Instance) Status(group string) (st core.Status, ok bool, err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.write("status", []byte(group)); err != nil {
		return st, false, err
	}
	r, err := i.call("status", i.fStatus, uint64(len(group)))
	if err != nil {
		return st, false, err
	}
	b, err := i.result("status", r)
	if me, isME := err.(*ModuleError); isME && me.Code == CodeNotFound {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if _, err := abi.UnmarshalStatus(b, &st); err != nil {
		return st, false, fmt.Errorf("host: decoding status: %w", err)
	}
	return st, true, nil
}

// Reset drops every group, as if freshly instantiated (linear memory does not
// shrink).
func (i *Instance) Reset() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	r, err := i.call("reset", i.fReset)
	if err != nil {
		return err
	}
	if int32(r) != 0 {
		_, err := i.result("reset", uint64(int64(int32(r))))
		return err
	}
	i.groups = 0
	return nil
}

// MemoryBytes is the size of the instance's linear memory.
func (i *Instance) MemoryBytes() uint64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.dead != nil {
		return 0
	}
	return uint64(i.mem.Size())
}

// Err returns the trap that closed the instance, or nil.
func (i *Instance) Err() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.dead
}

// Close closes the instance. Later calls return ErrClosed.
func (i *Instance) Close(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.dead != nil {
		return nil
	}
	i.dead = ErrClosed
	return i.mod.Close(ctx)
}

// capBuffer keeps the first max bytes written (the module's stderr).
type capBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.max - len(c.b); n > 0 {
		c.b = append(c.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}

func (c *capBuffer) suffix() string {
	if s := c.String(); s != "" {
		return "; module stderr: " + s
	}
	return ""
}
