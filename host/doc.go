// Package host runs leader elections for Go programs in the style of
// client-go's leaderelection, on electcore's WebAssembly module (wazero,
// sandboxed: package host/wasmrt) or on the native Go core
// (NewNativeAgent). This package links no WebAssembly runtime.
//
// # Where to start
//
// Most programs need three calls:
//
//	rt, err := wasmrt.NewRuntime(ctx, wasmrt.Config{})             // load + compile once per process
//	defer rt.Close(ctx)
//	agent, err := rt.NewAgent(ctx, host.AgentConfig{Transport: tr, Store: store})
//	defer agent.Close(ctx)                                          // hands leadership off
//	el, err := agent.Join(ctx, core.Config{ID: "me", Group: "jobs", Members: ids}, host.Callbacks{
//		OnStartedLeading: func(ctx context.Context, term uint64) { /* lead until ctx is done; fence with term */ },
//		OnStoppedLeading: func(term uint64, reason string) {},
//		OnNewLeader:      func(leader string, term uint64) {},
//	})
//
// then el.Status, el.Resign, el.TransferTo, el.Campaign, el.Leave,
// el.AddMember and el.RemoveMember (quorum mode: change the configuration
// and wait until it commits; Callbacks.OnConfig reports each change), and
// agent.Stats. host.NewNativeAgent(ctx, cfg) in place of rt.NewAgent runs
// the same agent on the native core, with no runtime and no WebAssembly
// linked.
// Transports come from the packages under transport (transport/mem,
// transport/nats, transport/pilot), the state store from package
// statestore (or any [Store]).
//
// # What it does
//
//   - wasmrt (package host/wasmrt): Runtime. Loads the module (the
//     configured path, else $ELECTCORE_WASM, else the module built into the
//     program, so a program needs no file beside it), compiles it once per
//     process through a compilation cache, and runs it sandboxed: nothing
//     but fake clocks and a deterministic random source, bounded memory, a
//     deadline on every call. The machinery (instances, trap recovery, fuel)
//     is in internal/wasmhost.
//   - native.go: [Engine], what an agent steps, and the native core.
//   - agent.go: [Agent] and [Election]. One goroutine owns the core (a
//     self-healing module instance, or core.Engine for NewNativeAgent): it
//     batches received messages, joins and commands into one step, applies
//     the output through core.Driver — persist (Store.Save, [StateName])
//     before publish (on a publisher goroutine, in order, each step's
//     publishes in one Transport.PublishBatch where the transport has it),
//     then events → callbacks (in order per election, on a goroutine that
//     runs only while the election has callbacks queued) — and sleeps until the next message, the core's WakeAt or a
//     lease's end. When the module traps, the agent carries on with a new
//     instance restored from the persisted state (OnTrap, Stats.Traps).
//   - membership.go: [Election.AddMember], [Election.RemoveMember],
//     [ConfigChange] and [ErrRefused] (a refusal matched by request id).
//   - clock.go: [Clock], the monotonic milliseconds the agent gives the core.
//   - state.go: [Store], and Join refuses a persisted state it cannot trust
//     ([ErrStateUnusable]) rather than restart a member at term 0.
//
// The differential tests (the module under wazero and the Extism SDK give
// byte-identical output to the native core), trap and sandbox tests are in
// internal/wasmhost; measured costs are in BENCHMARKS.md.
package host
