// Package fuel instruments a WebAssembly module so that every call into it
// can be stopped: the host gets deadlines without wazero's
// WithCloseOnContextDone. Start with Instrument.
package fuel

import (
	"errors"
	"fmt"
)

// Deadlines without wazero's WithCloseOnContextDone.
//
// WithCloseOnContextDone makes wazero's compiled code call out of native code
// into Go at every loop iteration to ask whether the module was closed, and
// start a goroutine per call to watch the context: ~7× the cost of a step.
// Instead the module is instrumented once at load (like wasmtime's fuel):
//
//   - a new mutable i32 global, the fuel (exported as Export), is
//     decremented at the top of every loop — or, in a dispatch loop (the
//     shape of every function Go compiles to wasm, where every jump goes
//     through the loop's header), before each branch that can jump back;
//   - when it reaches 0 the code calls a new imported host function,
//     CheckModule.CheckName, and refills it with PerCheck.
//
// While it rewrites the code, it also turns a dispatch loop's forward jumps
// into direct branches (see dispatch): wazero does not, and they were a
// tenth of a step.
//
// The host's check traps the call (a Go panic, which wazero returns as an
// error) once it has run past its deadline, or at once after the host sets
// the fuel to 1 to interrupt it. A call that repeats no code ends on its
// own (recursion ends at the memory limit), so every call is stopped. The host call every PerCheck
// iterations matters as much as the test: Go cannot preempt a goroutine that
// is running wasm code, so without it a long call would hold up the garbage
// collector's stop-the-world — and a runaway one, the whole process, forever
// (wazero calls into Go at every iteration for the same reason). A check
// costs ~0.1 µs, every few hundred µs at most; a loop iteration pays a
// global decrement and a branch.

const (
	// Export names the fuel global the instrumentation adds.
	Export = "electcore.host.fuel"
	// CheckModule and CheckName name the host function it imports.
	CheckModule = "electcore:host"
	CheckName   = "check"
	// PerCheck is the number of loop iterations between checks.
	PerCheck = 10_000
)

// ErrInstrument reports a module the instrumentation cannot read.
var ErrInstrument = errors.New("cannot instrument the module")

// section is one section of a module.
type section struct {
	id   byte
	body []byte
}

// Instrument returns a copy of the module m with the fuel global, the check
// import (appended to the imports: every defined function's index moves up
// by one) and the fuel test at the top of every loop.
func Instrument(m []byte) ([]byte, error) {
	if len(m) < 8 || string(m[:4]) != "\x00asm" || string(m[4:8]) != "\x01\x00\x00\x00" {
		return nil, fmt.Errorf("%w: not a WebAssembly 1 binary", ErrInstrument)
	}
	var secs []section
	r := reader{b: m, i: 8}
	for r.i < len(m) {
		id := r.byte()
		size := r.u32()
		if r.err != nil || uint64(r.i)+uint64(size) > uint64(len(m)) {
			return nil, fmt.Errorf("%w: truncated section", ErrInstrument)
		}
		secs = append(secs, section{id, m[r.i : r.i+int(size)]})
		r.i += int(size)
	}
	find := func(id byte) int {
		for k, s := range secs {
			if s.id == id {
				return k
			}
		}
		return -1
	}
	ti, ii, gi, ei, ci := find(1), find(2), find(6), find(7), find(10)
	if ti < 0 || ii < 0 || gi < 0 || ei < 0 || ci < 0 {
		return nil, fmt.Errorf("%w: want type, import, global, export and code sections", ErrInstrument)
	}
	var in instrumenter
	var err error
	// Types: add () -> ().
	secs[ti].body, in.checkType, err = appendToVec(secs[ti].body, []byte{0x60, 0, 0})
	if err != nil {
		return nil, err
	}
	// Imports: count functions and globals, add the check.
	if in.funcImports, in.globalImports, err = countImports(secs[ii].body); err != nil {
		return nil, err
	}
	imp := appendName(nil, CheckModule)
	imp = appendName(imp, CheckName)
	imp = append(imp, 0x00)
	imp = appendU32(imp, in.checkType)
	if secs[ii].body, _, err = appendToVec(secs[ii].body, imp); err != nil {
		return nil, err
	}
	in.check = in.funcImports
	// Globals: add the fuel (mutable i32 = PerCheck).
	g := append([]byte{0x7f, 0x01, 0x41}, appendS32(nil, PerCheck)...)
	var n uint32
	if secs[gi].body, n, err = appendToVec(secs[gi].body, append(g, 0x0b)); err != nil {
		return nil, err
	}
	in.fuel = in.globalImports + n
	if err := checkConstExprs(secs[gi].body); err != nil {
		return nil, err
	}
	out := append([]byte(nil), m[:8]...)
	for _, s := range secs {
		body := s.body
		switch s.id {
		case 0: // custom: a name section's function indices would be stale
			rn := reader{b: body}
			if l := int(rn.u32()); rn.err == nil && rn.i+l <= len(body) && string(body[rn.i:rn.i+l]) == "name" {
				continue
			}
		case 7:
			body, err = in.exports(body)
		case 8: // start function
			rs := reader{b: body}
			f := rs.u32()
			if rs.err != nil {
				return nil, fmt.Errorf("%w: start section", ErrInstrument)
			}
			body = appendU32(nil, in.shift(f))
		case 9:
			body, err = in.elements(body)
		case 10:
			body, err = in.code(body)
		}
		if err != nil {
			return nil, err
		}
		out = appendSection(out, s.id, body)
	}
	return out, nil
}

// instrumenter holds the indices instrument works with.
type instrumenter struct {
	funcImports, globalImports uint32
	checkType, check, fuel     uint32
}

// shift maps an old function index to the new one.
func (in *instrumenter) shift(f uint32) uint32 {
	if f >= in.funcImports {
		return f + 1
	}
	return f
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

func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	return append(appendU32(b, uint32(len(s))), s...)
}

// appendToVec appends one encoded entry to a section that is a vector; it
// returns the new body and the entry's index.
func appendToVec(body, entry []byte) ([]byte, uint32, error) {
	r := reader{b: body}
	n := r.u32()
	if r.err != nil {
		return nil, 0, fmt.Errorf("%w: bad vector", ErrInstrument)
	}
	out := appendU32(nil, n+1)
	out = append(out, body[r.i:]...)
	return append(out, entry...), n, nil
}

func countImports(body []byte) (funcs, globals uint32, err error) {
	r := reader{b: body}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.skipBytes(int(r.u32())) // module
		r.skipBytes(int(r.u32())) // name
		switch r.byte() {
		case 0x00: // func: type index
			r.u32()
			funcs++
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
			return 0, 0, fmt.Errorf("%w: unknown import kind", ErrInstrument)
		}
	}
	if r.err != nil {
		return 0, 0, fmt.Errorf("%w: import section", ErrInstrument)
	}
	return funcs, globals, nil
}

// checkConstExprs refuses ref.func in the globals' initial values (their
// indices would need shifting; Go never writes them).
func checkConstExprs(body []byte) error {
	r := reader{b: body}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.byte() // valtype
		r.byte() // mutability
		for r.err == nil {
			op := r.byte()
			if op == 0x0b {
				break
			}
			if op == 0xd2 {
				return fmt.Errorf("%w: ref.func in a global's initial value", ErrInstrument)
			}
			r.immediates(op)
		}
	}
	if r.err != nil {
		return fmt.Errorf("%w: global section: %v", ErrInstrument, r.err)
	}
	return nil
}

// exports shifts function exports and exports the fuel.
func (in *instrumenter) exports(body []byte) ([]byte, error) {
	r := reader{b: body}
	n := r.u32()
	out := appendU32(nil, n+1)
	for ; n > 0 && r.err == nil; n-- {
		start := r.i
		r.skipBytes(int(r.u32()))
		kind := r.byte()
		out = append(out, body[start:r.i]...)
		idx := r.u32()
		if kind == 0x00 {
			idx = in.shift(idx)
		}
		out = appendU32(out, idx)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: export section", ErrInstrument)
	}
	out = appendName(out, Export)
	out = append(out, 0x03)
	return appendU32(out, in.fuel), nil
}

// elements shifts the function indices of element segments.
func (in *instrumenter) elements(body []byte) ([]byte, error) {
	r := reader{b: body}
	n := r.u32()
	out := appendU32(nil, n)
	for ; n > 0 && r.err == nil; n-- {
		start := r.i
		flags := r.u32()
		if flags > 7 {
			return nil, fmt.Errorf("%w: element segment kind %d", ErrInstrument, flags)
		}
		if flags&3 == 2 { // explicit table index
			r.u32()
		}
		if flags&1 == 0 { // active: offset expression
			for r.err == nil {
				op := r.byte()
				if op == 0x0b {
					break
				}
				r.immediates(op)
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			r.byte()
		}
		out = append(out, body[start:r.i]...)
		count := r.u32()
		out = appendU32(out, count)
		for ; count > 0 && r.err == nil; count-- {
			if flags&4 == 0 { // function indices
				out = appendU32(out, in.shift(r.u32()))
				continue
			}
			for r.err == nil { // expressions: ref.func f / ref.null t, end
				op := r.byte()
				out = append(out, op)
				if op == 0x0b {
					break
				}
				if op == 0xd2 {
					out = appendU32(out, in.shift(r.u32()))
					continue
				}
				s := r.i
				r.immediates(op)
				out = append(out, r.b[s:r.i]...)
			}
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: element section: %v", ErrInstrument, r.err)
	}
	return out, nil
}

// code rewrites the code section: function indices shifted, a dispatch
// loop's forward jumps made direct, and the test
//
//	global.get fuel; i32.const 1; i32.sub; global.set fuel
//	global.get fuel; i32.const 0; i32.le_s
//	if; call check; i32.const PerCheck; global.set fuel; end
//
// after every `loop blocktype` — except a dispatch loop (dispatchLoop), whose
// test goes before each branch back to it instead, unless that branch is
// known to jump forward.
func (in *instrumenter) code(body []byte) ([]byte, error) {
	fuel := appendU32(nil, in.fuel)
	var test []byte
	test = append(append(append(test, 0x23), fuel...), 0x41, 0x01, 0x6b)
	test = append(append(append(test, 0x24), fuel...), 0x23)
	test = append(append(test, fuel...), 0x41, 0x00, 0x4c, 0x04, 0x40, 0x10)
	test = append(appendU32(test, in.check), 0x41)
	test = append(appendS32(test, PerCheck), 0x24)
	test = append(append(test, fuel...), 0x0b)

	r := reader{b: body}
	n := r.u32()
	out := appendU32(make([]byte, 0, len(body)+len(body)/4), n)
	var fn []byte
	var frames []frame
	for k := uint32(0); k < n; k++ {
		size := int(r.u32())
		if r.err != nil || r.i+size > len(body) {
			return nil, fmt.Errorf("%w: function %d truncated", ErrInstrument, k)
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
		frames = append(frames[:0], frame{}) // the function's own block
		var d *dispatch
		// The two instructions before the current one (op and immediate,
		// for i32.const and local.set): a dispatch loop's forward branch is
		// `i32.const K; local.set state; br loop`.
		var prev, prev2 struct {
			op  byte
			imm int64
		}
		insertTest := func(at int) {
			fn = append(fn, f.b[last:at]...)
			fn = append(fn, test...)
			last = at
		}
		for f.i < len(f.b) && f.err == nil {
			at := f.i
			op := f.byte()
			switch op {
			case 0x10, 0x12, 0xd2: // call, return_call, ref.func: a function index
				idx := f.u32()
				fn = append(fn, f.b[last:at]...)
				fn = appendU32(append(fn, op), in.shift(idx))
				last = f.i
			case 0x02, 0x04: // block, if
				f.immediates(op)
				frames = append(frames, frame{})
			case 0x03: // loop
				f.immediates(op)
				if d == nil {
					if d = dispatchLoop(f.b[f.i:]); d != nil {
						d.frame = len(frames)
						frames = append(frames, frame{dispatch: true})
						for range d.blocks {
							frames = append(frames, frame{dispatchBlock: true})
						}
						f.i += d.header
						break
					}
				}
				// Every other loop: the test goes after its block type.
				fn = append(fn, f.b[last:f.i]...)
				fn = append(fn, test...)
				last = f.i
				frames = append(frames, frame{})
			case 0x0b: // end
				if len(frames) == 0 {
					f.fail("unbalanced end at %d", at)
					break
				}
				top := frames[len(frames)-1]
				frames = frames[:len(frames)-1]
				switch {
				case top.dispatchBlock:
					d.passed++
				case top.dispatch:
					d = nil
				}
			case 0x0c, 0x0d: // br, br_if
				depth := f.u32()
				if !targetsDispatch(frames, depth) {
					break
				}
				forward, j := false, uint32(0)
				if k := prev2.imm; op == 0x0c && prev2.op == 0x41 && prev.op == 0x21 && prev.imm == int64(d.state) && k >= 0 {
					j = d.def
					if k < int64(len(d.table)) {
						j = d.table[k]
					}
					forward = int(j) >= d.passed // lands after a dispatch block's end not yet passed
				}
				if !forward {
					insertTest(at)
					break
				}
				// Forward: branch straight to the block's end, the br_table's
				// target, which encloses the branch (the loop and its
				// br_table cost an indirect jump per jump).
				fn = append(fn, f.b[last:at]...)
				fn = appendU32(append(fn, 0x0c), uint32(len(frames)-1-(d.frame+d.blocks-int(j))))
				last = f.i
			case 0x0e: // br_table
				back := false
				for m := f.u32(); m > 0 && f.err == nil; m-- {
					back = back || targetsDispatch(frames, f.u32())
				}
				back = back || targetsDispatch(frames, f.u32())
				if back {
					insertTest(at)
				}
			case 0x41: // i32.const
				prev2, prev = prev, struct {
					op  byte
					imm int64
				}{op, int64(f.s32())}
				continue
			case 0x21: // local.set
				prev2, prev = prev, struct {
					op  byte
					imm int64
				}{op, int64(f.u32())}
				continue
			default:
				f.immediates(op)
			}
			prev2, prev = prev, struct {
				op  byte
				imm int64
			}{op: op}
		}
		if f.err != nil {
			return nil, fmt.Errorf("%w: function %d: %v", ErrInstrument, k, f.err)
		}
		fn = append(fn, f.b[last:]...)
		out = appendU32(out, uint32(len(fn)))
		out = append(out, fn...)
	}
	if r.err != nil || r.i != len(body) {
		return nil, fmt.Errorf("%w: code section", ErrInstrument)
	}
	return out, nil
}

// frame is an open block, loop or if of a function body.
type frame struct {
	dispatch      bool // the dispatch loop
	dispatchBlock bool // one of the blocks its br_table exits
}

// dispatch describes a dispatch loop, the shape Go's wasm code has in every
// function: a loop whose body starts with nested blocks and a br_table on a
// local (the state) that exits one of them:
//
//	loop; block; ... block; local.get state; br_table t...; end (block 0) code 0; end (block 1) code 1 ...
//
// Every jump between the function's basic blocks is `i32.const K; local.set
// state; br loop`: through the loop's header and an indirect jump, yet a
// forward jump when block K's code comes after the branch. Only the
// backward ones can repeat, so only they (and any other branch to the loop)
// get the test — the header paid it on every jump, ≈ 11 % of a heartbeat
// step's instructions — and each forward one becomes a direct branch to the
// end of the block the br_table would have exited, which encloses it
// (another 10 %: the state local is still set, so nothing else changes).
type dispatch struct {
	header int      // bytes from after the loop's block type to after the br_table
	blocks int      // the nested blocks
	state  uint32   // the local the br_table reads
	table  []uint32 // its targets (each < blocks) and default
	def    uint32
	passed int // the dispatch blocks whose end the scan has passed
	frame  int // the loop's index in the open frames; block j's is frame+blocks-j
}

// dispatchLoop recognizes a dispatch loop from the bytes after its block
// type, or returns nil.
func dispatchLoop(b []byte) *dispatch {
	r := reader{b: b}
	d := &dispatch{}
	for r.i+1 < len(b) && b[r.i] == 0x02 && b[r.i+1] == 0x40 {
		r.i += 2
		d.blocks++
	}
	if d.blocks == 0 || r.byte() != 0x20 {
		return nil
	}
	d.state = r.u32()
	if r.byte() != 0x0e {
		return nil
	}
	for m := r.u32(); m > 0 && r.err == nil; m-- {
		t := r.u32()
		if t >= uint32(d.blocks) {
			return nil
		}
		d.table = append(d.table, t)
	}
	if d.def = r.u32(); r.err != nil || d.def >= uint32(d.blocks) {
		return nil
	}
	d.header = r.i
	return d
}

// targetsDispatch reports whether a branch of relative depth depth from the
// innermost of frames goes to the dispatch loop.
func targetsDispatch(frames []frame, depth uint32) bool {
	return int(depth) < len(frames) && frames[len(frames)-1-int(depth)].dispatch
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

// s32 decodes a signed LEB128 number of up to 32 bits.
func (r *reader) s32() int32 {
	var v int32
	shift := 0
	for shift < 35 {
		c := r.byte()
		v |= int32(c&0x7f) << shift
		shift += 7
		if c < 0x80 {
			if shift < 32 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
	r.fail("bad LEB128 at %d", r.i)
	return 0
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
