//go:build electcore_traptest

package main

import "runtime"

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

// ec_test_heap reports the module's Go heap (runtime.MemStats): what 0 =
// HeapAlloc, 1 = HeapInuse, 2 = HeapSys, 3 = Sys, 4 = NumGC, 5 =
// TotalAlloc, 6 = Mallocs; with gc != 0
// after a collection (HeapAlloc is then the live data).
//
//go:wasmexport ec_test_heap
func ecTestHeap(what, gc int32) int64 {
	if gc != 0 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	switch what {
	case 0:
		return int64(ms.HeapAlloc)
	case 1:
		return int64(ms.HeapInuse)
	case 2:
		return int64(ms.HeapSys)
	case 3:
		return int64(ms.Sys)
	case 4:
		return int64(ms.NumGC)
	case 5:
		return int64(ms.TotalAlloc)
	case 6:
		return int64(ms.Mallocs)
	}
	return -1
}
