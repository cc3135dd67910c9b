// Package wasmhost runs electcore.wasm on wazero: the machinery behind
// wasmrt.Runtime, internal so that the public packages export only what a
// program needs to run elections. Its users are package host/wasmrt, tests
// and benchmarks that drive the module directly, and electhost (LoadModule).
//
// # Layers (read in this order)
//
//   - runtime.go: Runtime. Loads the module (LoadModule: the configured
//     path, else $ELECTCORE_WASM, else the module built into the program by
//     internal/module; a named file that is missing is an error, never
//     silently replaced), compiles it once per process through a compilation
//     cache (DefaultCacheDir: os.UserCacheDir()/electcore/wazero), and grants
//     it nothing but WASI's clock and random source — fake, deterministic
//     ones, which the Go runtime needs and the core never reads: no files,
//     network or arguments, and no environment but GOMEMLIMIT, set from the
//     memory bound so that the module's collector keeps within it. Memory is
//     bounded per instance (memory.go: MemoryLimitPages, raised by 16 KiB
//     for every group the instance joins beyond what it holds, with the
//     collector's soft limit) and every call has a deadline (CallTimeout), enforced through fuel the
//     module is instrumented with at load: every 10,000 loop iterations a
//     call checks its deadline in a host function (internal/fuel: ≈ 3–5 % of
//     a step, where wazero's WithCloseOnContextDone cost ~7×).
//   - instance.go: Instance, one module instance driven through the raw ABI
//     (wasm/ABI.md): Step, Join, Status, Reset. Calls are serialised. A trap
//     (fault, out of memory, deadline, or a panic the module recovered)
//     closes it: every later call returns the TrapError.
//   - engine.go: Engine, a self-healing Instance with core.Engine's shape
//     (Step satisfies core/sim's Stepper; host.Agent steps it). After a trap
//     it instantiates a new module and re-joins every group with the last
//     state the core asked to persist, reports the trap (OnTrap, a counter,
//     slog) and carries on.
//   - hostfuncs.go: HostFuncs, the functions the host-driven build imports
//     from the "electcore" module (wasm/ABI.md §3: now, publish, persist,
//     event, log), and Instance.HD/HDStatus to call its hd_* exports, for
//     tests that drive it the way a skill runner would.
//
// Tests build the module once per run (or use $ELECTCORE_WASM): the
// differential tests (diff_test.go, sim_test.go, extism_test.go,
// auth_test.go) require byte-identical output from the native core, this
// host and the Extism Go SDK; trap_test.go and sandbox_test.go show recovery
// without term regression or double votes. Benchmarks: host/BENCHMARKS.md.
package wasmhost
