// Package core is electcore's leader-election state machine: pure, deterministic
// and free of I/O.
//
// Start with [Engine]: it hosts any number of election groups and has one entry
// point, [Engine.Step]. A host feeds it an [Input] batch (the monotonic time,
// payloads received on the bus, commands such as resign) and gets back an
// [Output] batch, to be applied in this order:
//
//  1. Persist: write every [GroupState] durably (term and vote).
//  2. Publishes: send every [Message] on the bus.
//  3. Events: act on leadership changes; [Event.Term] is the fencing token.
//     Per group they come in the order things happened (a new leadership:
//     became-leader, then leader-changed naming this agent); act on the
//     state at the end of the Output, not on each event in turn.
//  4. WakeAt: call Step again no later than this time, even with nothing new
//     (at or before Now when a Step left due timers for the next one).
//
// Two host contracts carry the safety argument: Input.Now is read after the
// batch's messages arrived, and nothing is published before the state it
// rests on is durable, across batches too — [PersistGate] does that for a
// host whose saves can fail.
//
// The core never reads a clock, never sleeps, starts no goroutine, takes no lock
// and draws randomness only from a generator seeded by [Config.Seed]; the same
// configuration and inputs give byte-identical outputs natively and in
// WebAssembly. Bad input is counted and reported as a [EventRejected] event; it
// never panics and never changes election state.
//
// Two modes ([Mode]): [ModeQuorum], a Raft-style election with PreVote,
// CheckQuorum and a leader lease, safe under partitions, whose members change
// one at a time while it runs ([CmdAddMember], [CmdRemoveMember]; membership.go
// explains how); and [ModeBully], the
// seed skill's priority algorithm with terms, for swarms whose membership is not
// known in advance. The wire format (wire.go) is JSON, compatible with the seed
// skill's "election", "leader" and "heartbeat" messages.
//
// The batch types cross the WebAssembly boundary as MessagePack, encoded by
// the module's and the hosts' codec (internal/abi). The simulator that
// verifies this package lives in core/sim.
package core
