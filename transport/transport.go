package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// Message is one payload received on a topic.
type Message struct {
	Topic   string
	Payload []byte
}

// Transport is a publish/subscribe bus as the election host sees it.
//
// Every implementation in this package delivers a node's own publishes back to
// its own subscriptions on the same topic, as real buses do (NATS echo is on,
// pilot fans out to subscribers on the same node, the mem bus loops back).
// Hosts must therefore ignore or tolerate their own messages; the core does.
type Transport interface {
	// Publish sends payload on topic, returning once the broker accepted it or ctx ends.
	Publish(ctx context.Context, topic string, payload []byte) error
	// Subscribe delivers every message on topic to deliver (called from the
	// transport's own goroutine, never concurrently for one subscription) until
	// ctx is cancelled or the transport is closed. It keeps the subscription
	// alive: reconnects/resubscribes with back-off and counts gaps. It returns
	// after the subscription is first requested (not necessarily live: pilot
	// has no ready signal).
	Subscribe(ctx context.Context, topic string, deliver func(Message)) error
	// Stats returns a snapshot of the transport's counters.
	Stats() Stats
	// Close stops every subscription and releases the transport. It is
	// idempotent; after Close, Publish and Subscribe return ErrClosed.
	Close() error
}

// Stats are monotonically increasing counters of one Transport.
type Stats struct {
	Published     uint64 // Publish calls that succeeded
	PublishErrors uint64 // Publish calls that failed (pilot: on every broker; per-broker counts in PilotTransport.BrokerStats)
	Received      uint64 // messages handed to deliver callbacks
	Rejected      uint64 // garbage lines/messages that could not be parsed (never delivered)
	Duplicates    uint64 // copies dropped by de-duplication (pilot with several subscriptions)
	Dropped       uint64 // messages dropped: mem fault injection (loss, partition), overflow; NATS: a subscription's pending buffer full (slow consumer)
	Resubscribes  uint64 // subscription restarts after a gap (process exit, reconnect)
	Disconnects   uint64 // connection losses seen (NATS)
}

// counters is the atomic backing of Stats.
type counters struct {
	published, publishErrors, received, rejected, duplicates, dropped, resubscribes, disconnects atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Published:     c.published.Load(),
		PublishErrors: c.publishErrors.Load(),
		Received:      c.received.Load(),
		Rejected:      c.rejected.Load(),
		Duplicates:    c.duplicates.Load(),
		Dropped:       c.dropped.Load(),
		Resubscribes:  c.resubscribes.Load(),
		Disconnects:   c.disconnects.Load(),
	}
}

// Sentinel errors. Use errors.Is: a *PilotError matches the sentinel of its code.
var (
	// ErrClosed is returned by a Transport used after Close.
	ErrClosed = errors.New("transport: closed")

	// ErrConnectionFailed: the broker/daemon could not be reached or dropped
	// the connection (pilot code "connection_failed"; NATS not connected).
	ErrConnectionFailed = errors.New("connection failed")
	// ErrNotFound: pilot code "not_found" (unknown or cleanly stopped host).
	ErrNotFound = errors.New("not found")
	// ErrTimeout: pilot code "timeout", or a publish killed at its deadline.
	ErrTimeout = errors.New("timeout")
	// ErrInvalidArgument: pilot code "invalid_argument".
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotRunning: pilot code "not_running" (the local pilot daemon is down).
	ErrNotRunning = errors.New("not running")
	// ErrAlreadyExists: pilot code "already_exists".
	ErrAlreadyExists = errors.New("already exists")
	// ErrInternal: pilot code "internal", or an unparseable pilotctl failure.
	ErrInternal = errors.New("internal error")
)

// PilotError is a failure reported by pilotctl on stderr as
// {"status":"error","code":C,"message":M,"hint":H} with exit status 1.
type PilotError struct {
	Op      string // pilotctl command: "publish", "subscribe", ...
	Host    string // target host, if any
	Code    string // e.g. "connection_failed", "not_found", "timeout"
	Message string
	Hint    string
}

func (e *PilotError) Error() string {
	s := "pilotctl"
	if e.Op != "" {
		s += " " + e.Op
	}
	if e.Host != "" {
		s += " " + e.Host
	}
	s = fmt.Sprintf("%s: %s: %s", s, e.Code, e.Message)
	if e.Hint != "" {
		s += " (hint: " + e.Hint + ")"
	}
	return s
}

// Is maps the pilot error code to this package's sentinel errors.
func (e *PilotError) Is(target error) bool {
	return target != nil && codeSentinel(e.Code) == target
}

func codeSentinel(code string) error {
	switch code {
	case "connection_failed":
		return ErrConnectionFailed
	case "not_found":
		return ErrNotFound
	case "timeout":
		return ErrTimeout
	case "invalid_argument":
		return ErrInvalidArgument
	case "not_running":
		return ErrNotRunning
	case "already_exists":
		return ErrAlreadyExists
	case "internal":
		return ErrInternal
	}
	return nil
}
