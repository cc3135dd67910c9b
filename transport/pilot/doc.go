// Package pilot is a transport.Transport over Pilot Protocol, through its
// pilotctl CLI, following the measured contract in docs/pilotctl.md.
//
// Where things are:
//
//   - pilot.go: Transport, New, Publish, Subscribe, Close.
//   - options.go: Options (New applies the defaults they name).
//   - queue.go: one publish process per message and broker, each broker
//     with its own deadline, queue and back-off (ErrBackoff), and the check
//     that a broker answering nothing is cut off.
//   - layout.go: Node, LocalNode, Layout: lay a broker list out around the
//     local node (never publishing to it).
//   - subscribe.go: long-lived NDJSON subscribe processes, restarted with
//     back-off or when stalled.
//   - dedup.go: copies of one message from several brokers delivered once.
//   - stats.go: BrokerStats and the publish latency histogram.
//   - errors.go: pilotctl's stderr error JSON as *Error, matching the
//     transport package's sentinel errors.
//
// Tests run it against internal/pilotstandin, a stand-in that also models
// the real network's faults.
package pilot
