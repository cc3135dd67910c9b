// Package transport holds the publish/subscribe buses an electcore agent
// moves the core's messages over: an in-process bus (mem), core NATS, and
// Pilot (through the pilotctl CLI). The core never calls out; the agent
// (package host) moves bytes between a Transport and the core.
//
// Where to start:
//
//   - transport.go: the Transport interface every bus implements, Message,
//     Stats, and the typed errors (ErrClosed, ErrConnectionFailed,
//     ErrNotFound, ErrTimeout, ErrInvalidArgument, ErrNotRunning, *PilotError).
//   - mem.go: NewMemBus, an in-process bus with fault injection (loss,
//     duplication, delay/reordering, one-way or two-way partitions, seeded
//     decisions). Use it for demos (--transport mem) and tests.
//   - nats.go: NewNATSTransport over core NATS. Topic "election:<group>" is
//     used as the subject as is (':' is legal in NATS subjects); other topics
//     are mapped by NATSSubject. Package natstest starts a real embedded
//     nats-server for tests.
//   - pilot.go: NewPilotTransport over the pilotctl CLI, following the
//     measured contract in docs/pilotctl.md: long-lived NDJSON subscribe
//     processes restarted with back-off or when stalled, one publish process
//     per message and broker with per-broker deadline, queue and back-off,
//     copies from several brokers de-duplicated, stderr error JSON mapped to
//     *PilotError. PilotLayout lays a broker list out around the local node
//     (never publishing to it). Tests run it against internal/pilotstandin,
//     a stand-in that also models the real network's faults.
//
// Conventions shared by all transports:
//
//   - A node receives its own publishes (as real buses do: NATS echo, pilot
//     fan-out to every subscriber of the broker or, when the layout never
//     publishes to a broker it subscribes on, a local loopback; mem loopback).
//   - deliver callbacks run on the transport's goroutines, one at a time per
//     subscription, and must return promptly; they must not call Close.
//     After Close returns, no deliver call is running or will start.
//   - Delivery is at most once per bus hop: nothing is stored or retried
//     (pilot and core NATS keep no history), so a subscriber misses what is
//     published while it is reconnecting. Stats.Resubscribes and the OnGap
//     options report such gaps; the election protocol tolerates them.
//   - Options take a *slog.Logger; nil means silent (never slog.Default()).
package transport
