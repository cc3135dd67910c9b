package fuel

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/electcore/electcore/internal/testwasm"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// spinModule is a hand-assembled module: an imported function env.nop, one
// immutable global, and an export "spin" whose body is body (default: a loop
// that never ends: loop; br 0; end).
func spinModule(body ...byte) []byte {
	if body == nil {
		body = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b}
	}
	return spinModuleLocals([]byte{0}, body)
}

// dispatchSpin is the body of a spin function shaped like Go's wasm code (a
// dispatch loop): state 0 jumps forward to state 1, which jumps back to
// state 0, forever. Its one local is the state.
var dispatchSpin = []byte{
	0x03, 0x40, // loop
	0x02, 0x40, 0x02, 0x40, // block; block
	0x20, 0x00, 0x0e, 0x01, 0x00, 0x01, // local.get 0; br_table 0 1
	0x0b,                               // end: state 0
	0x41, 0x01, 0x21, 0x00, 0x0c, 0x01, // i32.const 1; local.set 0; br 1 (forward, to state 1)
	0x0b,                               // end: state 1
	0x41, 0x00, 0x21, 0x00, 0x0c, 0x00, // i32.const 0; local.set 0; br 0 (back to state 0)
	0x0b, // end loop
}

func spinModuleLocals(locals, body []byte) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = appendSection(m, 1, []byte{1, 0x60, 0, 0})                                  // type 0: () -> ()
	m = appendSection(m, 2, []byte{1, 3, 'e', 'n', 'v', 3, 'n', 'o', 'p', 0x00, 0}) // import env.nop: func 0
	m = appendSection(m, 3, []byte{1, 0})                                           // func 1 of type 0
	m = appendSection(m, 6, []byte{1, 0x7f, 0x00, 0x41, 0x00, 0x0b})                // global 0: i32 const 0
	m = appendSection(m, 7, []byte{1, 4, 's', 'p', 'i', 'n', 0x00, 0x01})           // export "spin" = func 1
	code := append(append([]byte{}, locals...), body...)
	code = append(code, 0x0b)
	return appendSection(m, 10, append([]byte{1, byte(len(code))}, code...))
}

// instantiateSpin instantiates the instrumented spin module; check is the
// host's check function.
func instantiateSpin(t *testing.T, check func(context.Context)) (api.Module, api.MutableGlobal) {
	return instantiate(t, spinModule(), check)
}

func instantiate(t *testing.T, module []byte, check func(context.Context)) (api.Module, api.MutableGlobal) {
	t.Helper()
	m, err := Instrument(module)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().WithFunc(func() {}).Export("nop").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewHostModuleBuilder(CheckModule).NewFunctionBuilder().WithFunc(check).Export(CheckName).Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.Instantiate(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := mod.ExportedGlobal(Export).(api.MutableGlobal)
	if !ok {
		t.Fatal("no fuel global")
	}
	return mod, g
}

// TestInterruptStopsALoop: an interrupt (fuel set to 1, the check traps)
// stops a loop that never ends; until then the check runs every
// PerCheck iterations.
func TestInterruptStopsALoop(t *testing.T) {
	t.Run("loop", func(t *testing.T) { testInterrupt(t, spinModule()) })
	// A dispatch loop's test is on its backward branch, not its header.
	t.Run("dispatch", func(t *testing.T) { testInterrupt(t, spinModuleLocals([]byte{1, 1, 0x7f}, dispatchSpin)) })
}

func testInterrupt(t *testing.T, module []byte) {
	var stop, checks atomic.Int64
	mod, fuel := instantiate(t, module, func(context.Context) {
		checks.Add(1)
		if stop.Load() != 0 {
			panic(errDeadline)
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := mod.ExportedFunction("spin").Call(context.Background())
		done <- err
	}()
	// The loop spins, checking, and does not return: waited for by the
	// first check, not for a time (a loaded runner may not schedule the
	// loop within 50 ms).
	for giveUp := time.Now().Add(time.Minute); checks.Load() == 0; {
		select {
		case err := <-done:
			t.Fatalf("spin returned before the interrupt: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(giveUp) {
			t.Fatal("no check in a minute of spinning")
		}
	}
	stop.Store(1)
	fuel.Set(1)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), errDeadline.Error()) {
			t.Fatalf("interrupted spin: %v", err)
		}
	case <-time.After(time.Minute): // a give-up
		t.Fatal("the interrupt did not stop the loop")
	}
	t.Logf("%d checks", checks.Load())
}

// TestDeadlineStopsALoop: a check that traps past a deadline stops a call
// that never ends soon after it, even while other goroutines keep collecting
// garbage (a stop-the-world needs the spinning goroutine to reach Go code,
// which the checks give it: without them this test would hang). The host's
// own check (wasmhost.Instance) works this way. "Soon" is counted in the
// calling thread's CPU time, from the last check that found the deadline
// ahead to the one that trapped: that is what the checks bound (one every
// few hundred µs of running, fuel.go); the wall-clock time also counts
// whatever the OS and the collector keep the thread waiting, unbounded on a
// loaded machine (at load ~12, 2 of 50 runs stopped 210-230 ms late).
func TestDeadlineStopsALoop(t *testing.T) {
	const timeout, maxLate = 40 * time.Millisecond, 10 * time.Millisecond
	// The call and its checks run on this goroutine: keep it on one thread
	// for threadCPU.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var deadline atomic.Int64
	var aheadCPU, trapCPU int64 // set by the checks, on this goroutine
	mod, _ := instantiateSpin(t, func(context.Context) {
		cpu := threadCPU()
		if time.Now().UnixNano() > deadline.Load() {
			trapCPU = cpu
			panic(errDeadline)
		}
		aheadCPU = cpu
	})
	gcDone := make(chan struct{})
	defer close(gcDone)
	go func() {
		for {
			select {
			case <-gcDone:
				return
			default:
				runtime.GC()
			}
		}
	}()
	for range 3 {
		t0 := time.Now()
		deadline.Store(t0.Add(timeout).UnixNano())
		aheadCPU = threadCPU()
		_, err := mod.ExportedFunction("spin").Call(context.Background())
		took := time.Since(t0)
		if err == nil || !strings.Contains(err.Error(), errDeadline.Error()) {
			t.Fatalf("spin: %v", err)
		}
		late := time.Duration(trapCPU - aheadCPU)
		if took < timeout || late > maxLate {
			t.Fatalf("stopped after %v (want at least %v), having run %v of CPU time since the last check before the deadline (want at most %v)",
				took, timeout, late, maxLate)
		}
		t.Logf("a %v deadline stopped the call after %v, at most %v of CPU time past it", timeout, took, late)
	}
}

// errDeadline is what the tests' checks panic with.
var errDeadline = errors.New("deadline exceeded")

// TestInstrumentModule: in the real module every loop starts with the test,
// and nothing else changes but the sections that must.
func TestInstrumentModule(t *testing.T) {
	path, err := testwasm.Module("")
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	im, err := Instrument(m)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	// Count the loops of the original and the checks of the instrumented
	// code by walking both.
	loops, checks := countLoops(t, m, -1), countLoops(t, im, 1)
	if loops == 0 || loops != checks {
		t.Fatalf("%d loops, %d checked", loops, checks)
	}
	t.Logf("%d loops instrumented in %v; %d → %d bytes", loops, took.Round(time.Millisecond), len(m), len(im))
	for name, bad := range map[string][]byte{
		"simd":      spinModule(0xfd, 0x0f), // i8x16.splat
		"exception": spinModule(0x06, 0x40, 0x0b),
		"truncated": spinModule()[:40],
		"not wasm":  []byte("hello, world"),
	} {
		if _, err := Instrument(bad); !errors.Is(err, ErrInstrument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// countLoops counts the loops of the code section; with check ≥ 0 it also
// requires each to be followed by the interrupt test or to be a dispatch
// loop (whose tests are on its backward branches: TestInterruptStopsALoop).
func countLoops(t *testing.T, m []byte, check int) int {
	t.Helper()
	r := reader{b: m, i: 8}
	var code []byte
	for r.i < len(m) {
		id, size := r.byte(), int(r.u32())
		if id == 10 {
			code = m[r.i : r.i+size]
		}
		r.i += size
	}
	c := reader{b: code}
	n := 0
	for fns := c.u32(); fns > 0; fns-- {
		size := int(c.u32())
		f := reader{b: code[c.i : c.i+size]}
		c.i += size
		for nl := f.u32(); nl > 0; nl-- {
			f.u32()
			f.byte()
		}
		for f.i < len(f.b) && f.err == nil {
			op := f.byte()
			f.immediates(op)
			if op == 0x03 {
				if check >= 0 {
					rest := f.b[f.i:]
					tested := len(rest) >= 2 && rest[0] == 0x23 && bytes.Contains(rest[:min(len(rest), 24)], []byte{0x4c, 0x04, 0x40, 0x10})
					if !tested && dispatchLoop(rest) == nil {
						t.Fatalf("loop at %d without the test: % x", f.i, rest[:min(len(rest), 24)])
					}
				}
				n++
			}
		}
		if f.err != nil {
			t.Fatal(f.err)
		}
	}
	return n
}
