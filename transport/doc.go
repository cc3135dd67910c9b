// Package transport is the publish/subscribe bus an electcore agent moves the
// core's messages over, as the agent sees it: the Transport interface,
// Message, Stats (and Counters, their atomic backing for implementations),
// and the errors every bus reports (ErrClosed, ErrConnectionFailed,
// ErrNotFound, ErrTimeout, ErrInvalidArgument, ErrNotRunning, ...). The core
// never calls out; the agent (package host) moves bytes between a Transport
// and the core.
//
// The buses are packages of their own, so a program links only those it
// imports:
//
//   - transport/mem: an in-process bus with fault injection (loss,
//     duplication, delay/reordering, partitions, seeded decisions), for
//     demos and tests.
//   - transport/nats: core NATS. Package transport/natstest starts a real
//     embedded nats-server for tests.
//   - transport/pilot: Pilot Protocol through its pilotctl CLI
//     (docs/pilotctl.md).
//   - transport/transporttest: helpers for testing a Transport, and the
//     round every bus must pass (Exchange).
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
//   - A transport with counters beyond Stats exposes them itself (pilot:
//     Transport.BrokerStats, per broker); electhost reads them for /metrics.
package transport
