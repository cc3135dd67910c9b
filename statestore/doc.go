// Package statestore keeps an election member's durable state — each
// group's term, vote and epoch, which the agent saves before it publishes
// anything that depends on them — so that a restarted member never votes
// twice in one term.
//
//   - state.go: Store, atomic and checksummed per-name blobs in one
//     directory, locked against a second process (ErrLocked). Load
//     distinguishes ErrNotFound (never saved: a fresh start is safe) from
//     ErrMissing (it existed and vanished: do not start fresh) and
//     ErrCorrupt. FileName says which file holds a name.
//   - mem.go: Mem, the same Save and Load in memory, for demos and tests
//     where losing the state with the process is the point.
package statestore
