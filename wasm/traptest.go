//go:build electcore_traptest

package main

// A test-only export (built with -tags electcore_traptest, never in
// electcore.wasm): ec_test_trap faults outside any recover, so the module
// traps for real (the Go runtime aborts the instance), which host tests use
// to check that the host replaces the instance with its state intact.
//
//go:wasmexport ec_test_trap
func ecTestTrap(kind int32) int32 {
	switch kind {
	case 1: // a nil dereference with no recover: a fatal panic
		var p *[16]byte
		return int32(p[kind])
	case 2: // runaway recursion: the stack limit, the memory limit or the deadline
		return ecTestTrap(2) + 1
	}
	return 0
}
