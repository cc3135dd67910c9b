package host

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Deadlines without wazero's WithCloseOnContextDone.
//
// WithCloseOnContextDone makes wazero's compiled code call out of native code
// into Go at every loop iteration to ask whether the module was closed, and
// start a goroutine per call to watch the context: ~7× the cost of a step.
// Instead, like wasmtime's epoch interruption, the module is instrumented
// once at load: a new mutable i32 global (exported as interruptExport) is
// tested at the top of every loop, and a set global traps the call
// (`unreachable`). A loop-free call ends on its own, so this stops any call:
// the runtime's watchdog (below) sets the global of an instance whose
// call overran its deadline. The test is a load and a branch per iteration.

// interruptExport is the name of the global the instrumentation adds.
const interruptExport = "electcore.host.interrupt"

// errInstrument reports a module the instrumentation cannot read.
var errInstrument = errors.New("cannot instrument the module")

// instrument returns a copy of the module m with the interrupt global and a
// test of it at the top of every loop.
func instrument(m []byte) ([]byte, error) {
	if len(m) < 8 || string(m[:4]) != "\x00asm" || string(m[4:8]) != "\x01\x00\x00\x00" {
		return nil, fmt.Errorf("%w: not a WebAssembly 1 binary", errInstrument)
	}
	var (
		importedGlobals uint32
		global          uint32 // index of the new global
		sawGlobal       bool
		sawExport       bool
	)
	out := make([]byte, 0, len(m)+len(m)/16)
	out = append(out, m[:8]...)
	r := reader{b: m, i: 8}
	for r.i < len(m) {
		id := r.byte()
		size := r.u32()
		if r.err != nil || uint64(r.i)+uint64(size) > uint64(len(m)) {
			return nil, fmt.Errorf("%w: truncated section", errInstrument)
		}
		body := m[r.i : r.i+int(size)]
		r.i += int(size)
		switch id {
		case 2: // imports: count the imported globals
			n, err := countImportedGlobals(body)
			if err != nil {
				return nil, err
			}
			importedGlobals = n
		case 6: // globals: append ours (mutable i32 = 0)
			s := reader{b: body}
			n := s.u32()
			if s.err != nil {
				return nil, fmt.Errorf("%w: global section", errInstrument)
			}
			global = importedGlobals + n
			sec := appendU32(nil, n+1)
			sec = append(sec, body[s.i:]...)
			sec = append(sec, 0x7f, 0x01, 0x41, 0x00, 0x0b)
			out = appendSection(out, id, sec)
			sawGlobal = true
			continue
		case 7: // exports: export it
			if !sawGlobal {
				return nil, fmt.Errorf("%w: no global section before the exports", errInstrument)
			}
			s := reader{b: body}
			n := s.u32()
			if s.err != nil {
				return nil, fmt.Errorf("%w: export section", errInstrument)
			}
			sec := appendU32(nil, n+1)
			sec = append(sec, body[s.i:]...)
			sec = appendU32(sec, uint32(len(interruptExport)))
			sec = append(sec, interruptExport...)
			sec = append(sec, 0x03)
			sec = appendU32(sec, global)
			out = appendSection(out, id, sec)
			sawExport = true
			continue
		case 10: // code: the test at every loop
			if !sawExport {
				return nil, fmt.Errorf("%w: no export section before the code", errInstrument)
			}
			sec, err := instrumentCode(body, global)
			if err != nil {
				return nil, err
			}
			out = appendSection(out, id, sec)
			continue
		}
		out = appendSection(out, id, body)
	}
	if !sawExport {
		return nil, fmt.Errorf("%w: no global, export or code section", errInstrument)
	}
	return out, nil
}

func appendSection(out []byte, id byte, body []byte) []byte {
	out = append(out, id)
	out = appendU32(out, uint32(len(body)))
	return append(out, body...)
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func countImportedGlobals(body []byte) (uint32, error) {
	r := reader{b: body}
	var globals uint32
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.skipBytes(int(r.u32())) // module
		r.skipBytes(int(r.u32())) // name
		switch r.byte() {
		case 0x00: // func: type index
			r.u32()
		case 0x01: // table: reftype, limits
			r.byte()
			r.limits()
		case 0x02: // memory: limits
			r.limits()
		case 0x03: // global: valtype, mutability
			r.byte()
			r.byte()
			globals++
		case 0x04: // tag: attribute, type index
			r.byte()
			r.u32()
		default:
			return 0, fmt.Errorf("%w: unknown import kind", errInstrument)
		}
	}
	if r.err != nil {
		return 0, fmt.Errorf("%w: import section", errInstrument)
	}
	return globals, nil
}

// instrumentCode rewrites the code section: after every `loop blocktype` it
// inserts `global.get g; if; unreachable; end`.
func instrumentCode(body []byte, g uint32) ([]byte, error) {
	check := append([]byte{0x23}, appendU32(nil, g)...)
	check = append(check, 0x04, 0x40, 0x00, 0x0b)
	r := reader{b: body}
	n := r.u32()
	out := appendU32(make([]byte, 0, len(body)+len(body)/8), n)
	var fn []byte
	for k := uint32(0); k < n; k++ {
		size := int(r.u32())
		if r.err != nil || r.i+size > len(body) {
			return nil, fmt.Errorf("%w: function %d truncated", errInstrument, k)
		}
		f := reader{b: body[r.i : r.i+size]}
		r.i += size
		// Locals: count, then (n, valtype) pairs.
		for nl := f.u32(); nl > 0 && f.err == nil; nl-- {
			f.u32()
			f.byte()
		}
		fn = append(fn[:0], f.b[:f.i]...)
		last := f.i
		for f.i < len(f.b) && f.err == nil {
			op := f.byte()
			f.immediates(op)
			if op == 0x03 && f.err == nil { // loop: the test goes after its block type
				fn = append(fn, f.b[last:f.i]...)
				fn = append(fn, check...)
				last = f.i
			}
		}
		if f.err != nil {
			return nil, fmt.Errorf("%w: function %d: %v", errInstrument, k, f.err)
		}
		fn = append(fn, f.b[last:]...)
		out = appendU32(out, uint32(len(fn)))
		out = append(out, fn...)
	}
	if r.err != nil || r.i != len(body) {
		return nil, fmt.Errorf("%w: code section", errInstrument)
	}
	return out, nil
}

// reader decodes the parts of the binary format the instrumentation needs;
// the first error sticks.
type reader struct {
	b   []byte
	i   int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	r.i = len(r.b)
}

func (r *reader) byte() byte {
	if r.i >= len(r.b) {
		r.fail("truncated at %d", r.i)
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *reader) u32() uint32 {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		v |= uint32(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
	r.fail("bad LEB128 at %d", r.i)
	return 0
}

// skipLEB skips one (signed or unsigned) LEB128 number of up to 10 bytes.
func (r *reader) skipLEB() {
	for range 10 {
		if r.byte() < 0x80 {
			return
		}
	}
	r.fail("bad LEB128 at %d", r.i)
}

func (r *reader) skipBytes(n int) {
	if n < 0 || r.i+n > len(r.b) {
		r.fail("truncated at %d", r.i)
		return
	}
	r.i += n
}

func (r *reader) limits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

// immediates skips the immediates of the instruction op (MVP, sign
// extension, saturating conversions, bulk memory, reference types, tail
// calls). Others (SIMD, threads, exceptions) are refused.
func (r *reader) immediates(op byte) {
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if: block type
		if c := r.byte(); c != 0x40 && (c < 0x6f || c > 0x7f) { // a type index (s33)
			r.i--
			r.skipLEB()
		}
	case op == 0x0c || op == 0x0d: // br, br_if
		r.u32()
	case op == 0x0e: // br_table
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.u32()
		}
		r.u32()
	case op == 0x10 || op == 0x12: // call, return_call
		r.u32()
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
	case op == 0x1c: // select t*
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.byte()
		}
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		r.u32()
	case op >= 0x28 && op <= 0x3e: // loads, stores: memarg
		r.u32()
		r.u32()
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		r.u32()
	case op == 0x41 || op == 0x42: // i32.const, i64.const
		r.skipLEB()
	case op == 0x43:
		r.skipBytes(4)
	case op == 0x44:
		r.skipBytes(8)
	case op == 0xd0: // ref.null
		r.skipLEB()
	case op == 0xd2: // ref.func
		r.u32()
	case op == 0xfc:
		switch sub := r.u32(); sub {
		case 0, 1, 2, 3, 4, 5, 6, 7: // saturating truncations
		case 8: // memory.init
			r.u32()
			r.u32()
		case 9, 11, 13, 15, 16, 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
			r.u32()
		case 10, 12, 14: // memory.copy, table.init, table.copy
			r.u32()
			r.u32()
		default:
			r.fail("unsupported instruction 0xfc %d", sub)
		}
	case op <= 0x01 || op == 0x05 || op == 0x0b || op == 0x0f || op == 0x1a || op == 0x1b ||
		op >= 0x45 && op <= 0xc4 || op == 0xd1:
		// no immediates
	default:
		r.fail("unsupported instruction %#x at %d", op, r.i-1)
	}
}

// watchdog enforces a runtime's CallTimeout for all its instances with one
// goroutine. A call costs the instance two atomic increments of its call
// counter (odd while a call runs); every period (CallTimeout/4) the watchdog
// reads each counter, and interrupts an instance found in the same call for
// `ticks` periods in a row: a call is stopped between CallTimeout and
// 1.25×CallTimeout after it started.
type watchdog struct {
	period time.Duration
	ticks  int
	mu     sync.Mutex
	insts  map[*Instance]*watchState
	done   chan struct{}
	closed bool
}

type watchState struct {
	seq  uint64 // the counter last seen
	seen int    // consecutive ticks it was seen in one call
}

const watchTicks = 4

func newWatchdog(timeout time.Duration) *watchdog {
	return &watchdog{period: max(timeout/watchTicks, time.Millisecond), ticks: watchTicks,
		insts: map[*Instance]*watchState{}, done: make(chan struct{})}
}

// add watches i; the goroutine runs while any instance is watched.
func (w *watchdog) add(i *Instance) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if len(w.insts) == 0 {
		w.done = make(chan struct{})
		go w.run(w.done)
	}
	w.insts[i] = &watchState{}
	return nil
}

func (w *watchdog) remove(i *Instance) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.insts[i]; !ok {
		return
	}
	delete(w.insts, i)
	if len(w.insts) == 0 {
		close(w.done)
	}
}

func (w *watchdog) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed && len(w.insts) > 0 {
		close(w.done)
	}
	w.closed = true
	clear(w.insts)
}

func (w *watchdog) run(done chan struct{}) {
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		w.mu.Lock()
		for i, st := range w.insts {
			seq := i.calls.Load()
			if seq&1 == 0 || seq != st.seq {
				st.seq, st.seen = seq, 0
				continue
			}
			if st.seen++; st.seen >= w.ticks {
				i.interrupt(ErrDeadline)
			}
		}
		w.mu.Unlock()
	}
}
