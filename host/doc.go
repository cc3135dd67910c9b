// Package host runs electcore's WebAssembly module (electcore.wasm, built
// from ../wasm) inside a Go process on wazero, and builds leader elections
// on it in the style of client-go's leaderelection.
//
// # Where to start
//
// Most programs need three calls:
//
//	rt, err := host.NewRuntime(ctx, host.RuntimeConfig{})          // load + compile once per process
//	defer rt.Close(ctx)
//	agent, err := rt.NewAgent(ctx, host.AgentConfig{Transport: tr, Store: store})
//	defer agent.Close(ctx)                                          // hands leadership off
//	el, err := agent.Join(ctx, core.Config{ID: "me", Group: "jobs", Members: ids}, host.Callbacks{
//		OnStartedLeading: func(ctx context.Context, term uint64) { /* lead until ctx is done; fence with term */ },
//		OnStoppedLeading: func(term uint64, reason string) {},
//		OnNewLeader:      func(leader string, term uint64) {},
//	})
//
// then el.Status, el.Resign, el.TransferTo, el.Campaign, el.Leave, and
// agent.Stats. host.NewNativeAgent(ctx, cfg) in place of rt.NewAgent runs
// the same agent on the native core, with no runtime and no WebAssembly. Transports, the state store and clocks come from package
// hostfuncs.
//
// # Layers (read in this order)
//
//   - runtime.go: [Runtime]. Loads the module ([LoadModule]: the configured
//     path, else $ELECTCORE_WASM, else the module built into the program by
//     internal/module, so a program needs no file beside it; a named file
//     that is missing is an error, never silently replaced), compiles it once
//     per process through a compilation cache ([DefaultCacheDir]:
//     os.UserCacheDir()/electcore/wazero), and grants it nothing but WASI's
//     clock and random source — fake, deterministic ones, which the Go
//     runtime needs and the core never reads: no files, network, arguments or
//     environment. Memory is bounded (MemoryLimitPages, reserved up front with
//     WithMemoryCapacityFromMax) and every call has a deadline (CallTimeout),
//     enforced through fuel the module is instrumented with at load: every
//     10,000 loop iterations a call checks its deadline in a host function
//     (internal/fuel: ≈ 3–5 % of a step, where wazero's
//     WithCloseOnContextDone cost ~7×).
//   - instance.go: [Instance], one module instance driven through the raw
//     ABI (wasm/ABI.md): Step, Join, Status, Reset. Calls are serialised. A
//     trap (fault, out of memory, deadline, or a panic the module recovered)
//     closes it: every later call returns the [TrapError].
//   - engine.go: [Engine], a self-healing Instance with core.Engine's shape
//     (Step satisfies core/sim's Stepper). After a trap it instantiates a new
//     module and re-joins every group with the last state the core asked to
//     persist, reports the trap (OnTrap, a counter, slog) and carries on.
//   - agent.go: [Agent] and [Election]. One goroutine owns the Engine: it
//     batches received messages, joins and commands into one step, applies
//     the output in the core's order — persist (Store.Save, [StateName]) before
//     publish (Transport.Publish, on a publisher goroutine, in order), then
//     events → callbacks (in order, on one goroutine per election) — and
//     sleeps until the next message, the core's WakeAt or a lease's end. Join
//     refuses a persisted state it cannot trust ([ErrStateUnusable]) rather
//     than restart a member at term 0.
//   - hostdriven.go: [HostFuncs], the imports of the host-driven build
//     (wasm/ABI.md §3), for Go programs and tests that drive it the way a
//     skill runner would.
//
// Tests build the module once per run (or use $ELECTCORE_WASM): the
// differential tests (diff_test.go, sim_test.go, extism_test.go) require
// byte-identical output from the native core, this host and the Extism Go
// SDK; trap_test.go shows recovery without term regression or double votes.
// Measured costs are in BENCHMARKS.md.
package host
