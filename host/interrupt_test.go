package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// spinModule is a hand-assembled module: one immutable global, and an export
// "spin" that loops forever (loop; br 0; end).
func spinModule(body ...byte) []byte {
	if body == nil {
		body = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b}
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = appendSection(m, 1, []byte{1, 0x60, 0, 0})                        // type: () -> ()
	m = appendSection(m, 3, []byte{1, 0})                                 // one function of type 0
	m = appendSection(m, 6, []byte{1, 0x7f, 0x00, 0x41, 0x00, 0x0b})      // global 0: i32 const 0
	m = appendSection(m, 7, []byte{1, 4, 's', 'p', 'i', 'n', 0x00, 0x00}) // export "spin" = func 0
	code := append([]byte{0}, body...)                                    // no locals
	code = append(code, 0x0b)
	return appendSection(m, 10, append([]byte{1, byte(len(code))}, code...))
}

func instantiateSpin(t *testing.T) (api.Module, api.MutableGlobal) {
	t.Helper()
	m, err := instrument(spinModule())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	mod, err := r.Instantiate(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := mod.ExportedGlobal(interruptExport).(api.MutableGlobal)
	if !ok {
		t.Fatal("no interrupt global")
	}
	return mod, g
}

// TestInterruptStopsALoop: setting the global stops a loop that never ends.
func TestInterruptStopsALoop(t *testing.T) {
	mod, g := instantiateSpin(t)
	done := make(chan error, 1)
	go func() {
		_, err := mod.ExportedFunction("spin").Call(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("spin returned before the interrupt: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.Set(1)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("interrupted spin: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the interrupt did not stop the loop")
	}
}

// TestWatchdogDeadline: the watchdog interrupts a call between the timeout
// and 1.25× the timeout (plus scheduling slack), and leaves idle and short
// calls alone.
func TestWatchdogDeadline(t *testing.T) {
	mod, g := instantiateSpin(t)
	const timeout = 40 * time.Millisecond
	w := newWatchdog(timeout)
	defer w.close()
	idle := &Instance{stop: g}
	if err := w.add(idle); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * timeout) // an idle instance is never interrupted
	if idle.fired.Load() != nil {
		t.Fatal("idle instance interrupted")
	}
	for range 20 { // nor are many short calls
		idle.calls.Add(1)
		time.Sleep(timeout / 10)
		idle.calls.Add(1)
	}
	if idle.fired.Load() != nil {
		t.Fatal("short calls interrupted")
	}
	w.remove(idle)

	i := &Instance{stop: g}
	if err := w.add(i); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	i.calls.Add(1)
	_, err := mod.ExportedFunction("spin").Call(context.Background())
	i.calls.Add(1)
	took := time.Since(t0)
	if err == nil || i.fired.Load() == nil || !errors.Is(*i.fired.Load(), ErrDeadline) {
		t.Fatalf("spin: %v, fired %v", err, i.fired.Load())
	}
	if took < timeout || took > timeout*5/4+50*time.Millisecond {
		t.Fatalf("stopped after %v, want %v..%v", took, timeout, timeout*5/4)
	}
	t.Logf("a %v deadline stopped the call after %v", timeout, took)
}

// TestInstrumentModule: in the real module every loop starts with the test,
// and nothing else changes but the sections that must.
func TestInstrumentModule(t *testing.T) {
	m, err := os.ReadFile(testWasm)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	im, err := instrument(m)
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
		if _, err := instrument(bad); !errors.Is(err, errInstrument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// countLoops counts the loops of the code section; with check ≥ 0 it also
// requires each to be followed by the interrupt test and returns how many are.
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
					if len(rest) < 2 || rest[0] != 0x23 || !bytes.Contains(rest[:min(len(rest), 10)], []byte{0x04, 0x40, 0x00, 0x0b}) {
						t.Fatalf("loop at %d without the test: % x", f.i, rest[:min(len(rest), 10)])
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
