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
// Now (its own monotonic clock) and Wall (which jumps). Each node's clock
// runs at its own rate within 1 ± MaxDriftPPM of real time (the bound is per
// clock: two clocks differ by up to twice it), with a random origin at every
// restart; the rates are drawn per node for the whole run, or per life, or
// (always in the targeted schedule) half the nodes at +MaxDriftPPM and the
// others at −MaxDriftPPM for the whole run.
//
// Hosts batch: a node steps once per batch, which collects the messages,
// due timers and commands that arrive during the batching window of its
// current life (none for a third of the lives, else up to a bound drawn
// from the seed: 0, 1, 5, 20 ms or the base latency); a paused process
// steps only when it resumes, with its backlog. Now is read exactly as the
// contract allows and no more loosely: never earlier than the arrival of
// any message in the batch (nor the previous read), and half the time at a
// random instant between the last arrival and the step, so the engine sees
// a Now older than the step. The simulator applies each Output through
// core.Driver, the Go host's own loop: persist (through its PersistGate),
// then publish to every other node (and sometimes back to the sender, as
// real buses echo), then events (less a leadership the same Output
// revokes), then a wake-up at WakeAt. Election safety is checked on the
// engine's own became-leader events, before that filtering. Every step's
// Input and
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
// commands; pauses of a node's process (GC, SIGSTOP: of any node or of the
// leader, for a heartbeat interval plus up to 3 election timeouts, ending by
// the end of the fault phase, its clock and lease running on);
// replays of real messages arbitrarily long after they were sent (a sample
// of every publish of the fault phase, however old, to one node or to all).
// How much of each is drawn from the seed, from calm to hostile, as are the
// swarm size (3–7), priorities (often tied), timings, the batching windows
// and the clock model. Then a quiet phase: the network heals, every node
// restarts, and liveness is checked. Saves fail too (FaultMix.SaveFail):
// each host's core.Driver runs its Outputs through a core.PersistGate, which
// offers the unsaved state again before every later step and
// holds back the group's publishes (lost, for bully's "connected") and a
// leadership resting on it until a save succeeds; a crash loses the unsaved
// state. Half the seeds give the nodes a HandoffHoldMs of up to half an
// election timeout.
//
// In quorum mode, four seeds in five also change the configuration while
// all that runs (membership.go; every seed with Options.Membership): up to
// two spare nodes (s0, s1) boot waiting to be added (Config.AwaitConfig);
// members are added, removed (the leader, a crashed one, any) and replaced,
// one change at a time, asked at the leader or at any node (which forwards
// it), and asked again until committed; the swarm keeps 3–7 voters. When a
// change commits while a member of it has not persisted it, half the time
// the leader crashes at once, configuration messages are kept from that
// member for two election timeouts and it is told to campaign: only the
// election restriction keeps it from leading without the change.
//
// Options.Targeted adds the targeted adversarial schedule (targeted.go),
// which aims faults where the lease and vote rules are thinnest: clocks at
// opposite extremes of the drift bound, the leader cut off with a minority
// (quorum−1 nodes) right after a heartbeat, single messages and granted
// votes held back for 1–3 election timeouts, crash-restart loops, leader
// pauses, resignations and transfers that reach only some members, and
// campaign commands. When the run changes the configuration it also aims
// at membership: a change asked the instant a leader is elected, a new
// leader's first heartbeat held back from one member (which so learns a
// configuration of a term it has not entered), configuration messages
// delivered twice (the copy one to three election timeouts late), and old
// votes, resigns and configurations delivered to a member just restarted.
// In quorum mode, in half the seeds, it goes on where the quiet phase
// would end (healedhandoff.go), on the healed network, where every
// hand-off must succeed: the agreed leader hands over with every other
// member restarting as its resign leaves (so that the successor needs the
// votes of members that know no leader of their term); then hands over
// with its resign reaching the successor late, after that successor led,
// and the successor is paused past its lease with the resign and a
// hand-off command arriving meanwhile.
//
// Options.Adversary adds mallory (adversary.go), who forges, replays and
// floods for the whole run; with authentication on (HMAC by default) every
// invariant must hold as without it. Options.Outsider, with authentication
// off, forges during the fault phase what one message must not turn into an
// outage even then: acks 2^31 to 2^32 terms ahead, and newer configurations
// under a non-member's name.
//
// # Invariants
//
//   - Election safety: at most one node becomes leader of a term. Quorum
//     mode: always. Bully mode: whenever the network was connected, meaning
//     that from CollectMs·(1+drift) + Dmax before the first of the two
//     elections until the second, no message was lost (to loss, a partition,
//     an outage, a node being down, a crash in the middle of a publish or a
//     failed save), none took longer than Dmax, the
//     largest normal delay (latency + jitter), to arrive, no node was paused
//     and none was replayed. Two bully leaders of one term in a split
//     network are counted in Result.SplitBrains, not reported.
//   - Lease exclusivity (quorum), in global real time: at no real instant do
//     two nodes hold a lease, a lease being held from the real instant of
//     the Step whose EventBecameLeader or EventLease grants it until the
//     real instant the holder's own clock reaches LeaseUntil, or it steps
//     down, or it crashes (a pause does not end it). A leader that resigns
//     (or transfers) with Config.HandoffHoldMs set is still taken to act
//     until its clock has run that long after the resign, within its lease:
//     nobody may take a lease meanwhile.
//   - Terms never decrease in what a node persists, across restarts; a node
//     never casts two different votes in one term (from its persisted votes,
//     its granted vote messages, its own candidacies and the vote a resign
//     implies); persist-before-send: it never sends a vote its persisted
//     state does not cover, nor any message in its own term (all but
//     pre-votes and pre-vote requests) beyond its persisted term, and its
//     application is never told it leads a term not persisted.
//   - Leadership events (quorum): a node whose application was told it
//     leads term T (and not told it stepped down) never acks, grants a vote
//     or campaigns in a later term.
//   - Configurations (quorum, from what nodes persist and publish; see
//     membership.go): one member set per version (term, index); a node's
//     persisted version never goes back; a configuration message is covered
//     by its sender's persisted version; a version is committed once a
//     majority of its members persisted it in its term, and then no other
//     configuration is committed at its index, the nearest committed ones
//     differ from it by at most one member, and every leader of a later
//     term starts from it or a descendant (index at least its own, the same
//     members at its index); a leader is a member of its configuration and
//     nobody campaigns outside the configuration its request carries; a
//     configuration the core reports committed is committed.
//   - Liveness of membership changes: once the swarm agrees on a leader
//     after the faults, one change (an addition, or a removal, the leader's
//     own included) is asked, at the leader or any node and again every half
//     election timeout, and must be committed within [HealedChangeETs]
//     election timeouts.
//   - Liveness: once the faults stop (the network is whole, every node is up
//     and every message sent during the fault phase has arrived), a leader is
//     elected and known to every node within [LivenessBound] (with
//     membership changes: every node of the leader's configuration; removed
//     nodes and spares never added need not know it), and from then on the
//     swarm is never without an agreed leader for longer than that.
//   - Terms move no further than messages can move them: a node's persisted
//     term is at most 17 per message and step it took, plus 2,000 per
//     millisecond of the run (the core's MaxTermStep and 1,000 terms a
//     millisecond, with room for clock rates).
//   - With authentication on, no node reports a second process with a
//     member's id (core.EventDuplicateID): the simulator never runs one, so
//     such a report came from a replay, like a member's own message of an
//     earlier run.
//   - The core never rejects a payload the core produced, and a Stepper never
//     fails.
//
// Hand-offs are measured, not judged per run (handoff.go): a resign naming a
// successor sent on a healed network (after the fault phase and its late
// messages, nothing cut off) to a member that stays up should make that
// member leader of the next term. Result.HandoffsNamed and HandoffsLost
// count them; CI's quorum suites log them. Result.HandoffsUnheard,
// StalledHandoffs and LateHandoffResigns count the cases the targeted
// schedule aims at after the heal (healedhandoff.go), and
// TestTargetedQuorum fails if they become rare.
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
