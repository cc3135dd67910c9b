// Package sim is electcore's deterministic swarm simulator: N nodes, each
// driving its own election engine, on virtual time over a hostile bus, with
// every invariant of the core checked on every run.
//
// Start with [Run] (one seed) and [RunMany] (many seeds, in parallel, results
// in seed order); [Options] says what to simulate, [Result] and [Report] what
// was seen. A failing seed is replayed with Run(Options{Seed: s, Mode: m})
// and reproduces byte for byte; its [Violation] carries the real time, the
// nodes and a trace excerpt. The tests (sim_test.go, measure_test.go) show
// every use.
//
// # Model
//
// Time is virtual, in milliseconds, and every random choice comes from PCG
// streams seeded by Options.Seed: no wall clock, no global randomness, no
// goroutines inside a run. Each node is a [Stepper] (the native core.Engine by
// default, or the wasm module through Options.NewStepper) and gets only what a
// host gives it: Join with its persisted state, Inbound messages, Commands,
// Now (its own monotonic clock, running at a rate within 1 ± MaxDriftPPM of
// real time, with a fresh origin at every restart) and Wall (which jumps).
// The simulator applies each Output as the contract says: persist, then
// publish to every other node (and sometimes back to the sender, as real
// buses echo), then events, then a wake-up at WakeAt. Every step's Input and
// msgp-encoded Output can be recorded ([Trace], Options.Record) and replayed
// against another implementation ([Trace.Replay]); Result.TraceHash is a
// SHA-256 over all outputs for a quick comparison.
//
// # Fault mix (ScenarioFaults, the default)
//
// A fault phase (8 election timeouts) with per-delivery loss, duplication and
// delay outliers up to 3 election timeouts on top of a base latency (1–100
// ms, ±50% jitter); symmetric, asymmetric and one-way partitions, isolation
// of a node or of the current leader; crashes (of any node or of the leader)
// with quick or slow restarts from persisted state, a third of them in the
// middle of a step (the state is persisted, only a prefix of the publishes is
// sent, as the persist-before-send contract allows); broker outages (every
// message dropped); wall-clock jumps; random campaign, resign and transfer
// commands. How much of each is drawn from the seed, from calm to hostile, as
// are the swarm size (3–7), priorities (often tied) and timings. Then a quiet
// phase: the network heals, every node restarts, and liveness is checked.
//
// # Invariants
//
//   - Election safety: at most one node becomes leader of a term. Quorum
//     mode: always. Bully mode: whenever the network was connected, meaning
//     that from CollectMs·(1+drift) + Dmax before the first of the two
//     elections until the second, no message was lost (to loss, a partition,
//     an outage or a node being down) and none took longer than Dmax, the
//     largest normal delay (latency + jitter). Two bully leaders of one term
//     in a split network are counted in Result.SplitBrains, not reported.
//   - Lease exclusivity (quorum): at no real instant do two nodes hold a
//     lease, a lease being held from the EventBecameLeader or EventLease
//     that grants it until the node's own clock reaches LeaseUntil, or it
//     steps down, or it crashes.
//   - Terms never decrease in what a node persists, across restarts; a node
//     never casts two different votes in one term (from its persisted votes,
//     its granted vote messages, its own candidacies and the vote a resign
//     implies), and never sends a vote its persisted state does not cover.
//   - Liveness: once the faults stop (the network is whole, every node is up
//     and every message sent during the fault phase has arrived), a leader is
//     elected and known to every node within [LivenessBound], and from then
//     on the swarm is never without an agreed leader for longer than that.
//   - The core never rejects a payload the core produced, and a Stepper never
//     fails.
//
// # Measuring scenarios
//
// ScenarioFailover crashes the settled leader Cycles times (failover time to
// the new leader's election and to every node knowing it, and the election
// publishes in between); ScenarioResign makes it resign (hand-off time);
// ScenarioHeal splits the swarm in two and heals it (time to converge on one
// leader). Each disruption starts two election timeouts after the swarm
// settled, at a random phase of the heartbeat, so that a transfer to a better
// member has happened first.
package sim
