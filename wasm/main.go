//go:build wasip1

// Command wasm is electcore's WebAssembly module: the pure core (package
// core) behind three faces, built into one reactor module:
//
//		GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -ldflags="-s -w" -o electcore.wasm ./wasm
//
//	  - Extism plugin functions (go-pdk): join, step, status, groups, reset.
//	  - A lean raw ABI for fast hosts (the Go host in package host uses it):
//	    ec_input, ec_step, ec_status, ec_error, ec_reset.
//	  - A host-driven mode (hd_*) for skill runners that only supply functions:
//	    built with -tags electcore_hostdriven (see ABI.md for why it is a
//	    separate build of the same package), which leaves the Extism face out.
//
// Every export recovers panics and reports an error code; a trap (an
// unrecovered fault, out of memory, a host deadline) poisons the instance and
// the host must replace it. One module instance hosts one core.Engine with any
// number of groups. The ABI is documented in ABI.md next to this file.
package main

import (
	"runtime"
	"strconv"
	"unsafe"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

func main() {}

// The one engine of this instance and its scratch buffers. Nothing here is
// touched concurrently: an instance is never called concurrently, and
// goroutines run only during a call.
var (
	engine = newEngine()
	in     core.Input
	out    core.Output

	inBuf  []byte // module-owned input buffer (raw ABI), grown by ec_input
	outBuf []byte // the last output, valid until the next call
	errBuf []byte // the last error message
)

// Error codes returned by the raw exports (as negative results) and logged by
// the Extism exports.
const (
	errNone     = 0
	errTooLarge = 1 // input larger than core.MaxBatchBytes
	errDecode   = 2 // input is not valid msgp for the expected type
	errNotFound = 3 // status: group not joined
	errPanic    = 4 // a panic was recovered; the instance state may be suspect
	errRejected = 5 // join: the core rejected the group
	errEncode   = 6 // output could not be encoded
)

type codedError struct {
	code int
	msg  string
}

func (e *codedError) Error() string { return e.msg }

// fail returns an error with a code. Messages are built with strconv, not
// fmt: fmt, and the reflection it brings, would be ~280 KB of the module
// (RATIONALE.md).
func fail(code int, msg string) error {
	return &codedError{code: code, msg: msg}
}

func itoa(n int) string    { return strconv.Itoa(n) }
func utoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// panicText is what fmt's %v prints for a recovered value that is an error,
// a Stringer or a string (runtime faults are errors); the value of any other
// type is named only by its kind, which fmt would need reflection to print.
func panicText(r any) string {
	switch v := r.(type) {
	case error:
		return v.Error()
	case interface{ String() string }:
		return v.String()
	case string:
		return v
	}
	return "(a value that is not an error or a string)"
}

// codeOf returns err's code. Every error the exports report comes from fail
// unwrapped, so a type assertion finds it: errors.As would link reflectlite,
// ~55 KB of the module.
func codeOf(err error) int {
	if ce, ok := err.(*codedError); ok {
		return ce.code
	}
	return errPanic
}

// guard runs f, turning a panic into an errPanic error with its stack.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fail(errPanic, "electcore wasm: panic: "+panicText(r))
		}
	}()
	return f()
}

// setError records err for ec_error and returns its negative code.
func setError(err error) int64 {
	errBuf = append(errBuf[:0], err.Error()...)
	return -int64(codeOf(err))
}

// pack returns ptr<<32|len of b (b must stay alive: it is a package buffer).
func pack(b []byte) int64 {
	if len(b) == 0 {
		return 0
	}
	return int64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))<<32 | int64(len(b))
}

// stepBytes decodes one msgp Input, steps the engine and encodes the Output
// into outBuf.
func stepBytes(b []byte) error {
	if len(b) > core.MaxBatchBytes {
		return fail(errTooLarge, "input batch of "+itoa(len(b))+" bytes exceeds "+itoa(core.MaxBatchBytes))
	}
	// (DecodeInput checks nesting before any recursive decoder sees b; the
	// payloads it decodes alias b, which stays put until the step is done.)
	if err := abi.DecodeInput(b, &in); err != nil {
		return fail(errDecode, "decode input: "+err.Error())
	}
	out.Reset()
	engine.Step(&in, &out)
	err := encodeOut()
	letCollectorRun()
	return err
}

// letCollectorRun lets the runtime's other goroutines run before the call
// returns: its garbage collector's background mark workers among them.
// A module instance runs Go code only inside calls, and only on the
// calling goroutine unless that goroutine yields; ours never blocks. Then
// a collection could be left in its mark phase for good, with its heap
// growing until linear memory ran out: three agents with 3,000 groups
// each, one instance's collector stopped at its first cycle while its
// heap grew from 13 to 52 MB; at 10,000 groups every instance's stopped
// at its second and the heaps reached 110-120 MB in 45 s, where they stay
// at 40-50 MB with this yield (host/BENCHMARKS.md, "The module's memory
// follows its groups"). Called once per step: with nothing to run it
// costs a trip through the scheduler.
func letCollectorRun() { runtime.Gosched() }

func encodeOut() error {
	var err error
	outBuf, err = abi.EncodeOutput(outBuf[:0], &out)
	if err != nil {
		return fail(errEncode, "encode output: "+err.Error())
	}
	return nil
}

// statusBytes encodes the status of group into outBuf.
func statusBytes(group string) error {
	st, ok := engine.Status(group)
	if !ok {
		return fail(errNotFound, "group "+strconv.Quote(group)+" not joined")
	}
	var err error
	outBuf, err = abi.MarshalStatus(outBuf[:0], &st)
	if err != nil {
		return fail(errEncode, "encode status: "+err.Error())
	}
	return nil
}

// joinBytes applies a msgp Input that carries exactly one GroupSpec (and a
// time), failing if the core rejects it (in which case nothing changed).
func joinBytes(b []byte) error {
	if len(b) > core.MaxBatchBytes {
		return fail(errTooLarge, "input of "+itoa(len(b))+" bytes exceeds "+itoa(core.MaxBatchBytes))
	}
	var j core.Input
	if err := abi.DecodeInput(b, &j); err != nil {
		return fail(errDecode, "decode join input: "+err.Error())
	}
	if len(j.Join) != 1 || len(j.Inbound) != 0 || len(j.Commands) != 0 {
		return fail(errDecode, "join: want exactly one GroupSpec and no inbound or commands (use step for batches)")
	}
	out.Reset()
	if err := engine.Join(j.Join[0], j.Now, &out); err != nil {
		return fail(errRejected, err.Error())
	}
	err := encodeOut()
	letCollectorRun()
	return err
}

func newEngine() *core.Engine {
	e := core.NewEngine()
	if reusePayloads {
		e.ReusePayloads()
	}
	return e
}

func resetEngine() {
	engine = newEngine()
	in, out = core.Input{}, core.Output{}
}
