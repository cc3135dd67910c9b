package transport

import (
	"context"
	"errors"
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

// TextOnly is implemented by transports that carry only UTF-8 text without
// NUL bytes (pilot: its payloads travel as command-line arguments, one
// process per publish). An agent coalesces nothing over such a transport:
// it neither reads nor writes peer topics, as with host.AgentConfig's
// NoCoalescing.
type TextOnly interface {
	TextOnly() bool
}

// BatchPublisher is implemented by transports that send several messages
// for about the cost of one: an agent hands each step's publishes over
// together. PublishBatch publishes ms in order and stops at the first
// failure, returning how many were sent before it (counted in Stats as
// Publish counts them).
type BatchPublisher interface {
	PublishBatch(ctx context.Context, ms []Message) (sent int, err error)
}

// Subscription is one topic of a SubscribeBatch call: deliver gets its
// messages until ctx ends, as with Transport.Subscribe.
type Subscription struct {
	Ctx     context.Context
	Topic   string
	Deliver func(Message)
}

// BatchSubscriber is implemented by transports that make many
// subscriptions known to the broker for about the cost of one (NATS: one
// flush, one round trip, for all of them, where Subscribe costs one each).
// SubscribeBatch subscribes to every topic of subs, each as Subscribe
// would; when it returns, those that succeeded are as live as Subscribe
// makes them. It returns one error per subscription, in order (nil:
// subscribed). An agent joining many groups at once uses it
// (host.Agent.JoinAll).
type BatchSubscriber interface {
	SubscribeBatch(ctx context.Context, subs []Subscription) []error
}

// Stats are monotonically increasing counters of one Transport.
type Stats struct {
	Published     uint64 // Publish calls that succeeded
	PublishErrors uint64 // Publish calls that failed (pilot: on every broker; per-broker counts in pilot.Transport.BrokerStats)
	Received      uint64 // messages handed to deliver callbacks
	Rejected      uint64 // garbage lines/messages that could not be parsed (never delivered)
	Duplicates    uint64 // copies dropped by de-duplication (pilot with several subscriptions)
	Dropped       uint64 // messages dropped: mem fault injection (loss, partition), overflow; NATS: a subscription's pending buffer full (slow consumer)
	Resubscribes  uint64 // subscription restarts after a gap (process exit, reconnect)
	Disconnects   uint64 // connection losses seen (NATS)
}

// Counters are the atomic backing of Stats, for implementations: add to
// them as things happen, return Snapshot from Stats.
type Counters struct {
	Published, PublishErrors, Received, Rejected, Duplicates, Dropped, Resubscribes, Disconnects atomic.Uint64
}

// Snapshot reads the counters.
func (c *Counters) Snapshot() Stats {
	return Stats{
		Published:     c.Published.Load(),
		PublishErrors: c.PublishErrors.Load(),
		Received:      c.Received.Load(),
		Rejected:      c.Rejected.Load(),
		Duplicates:    c.Duplicates.Load(),
		Dropped:       c.Dropped.Load(),
		Resubscribes:  c.Resubscribes.Load(),
		Disconnects:   c.Disconnects.Load(),
	}
}

// Sentinel errors. Use errors.Is: a *pilot.Error matches the sentinel of its code.
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
