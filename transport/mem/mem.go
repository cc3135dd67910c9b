package mem

import (
	"container/heap"
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/electcore/electcore/transport"
)

// Options configures NewBus.
type Options struct {
	// Seed seeds the bus's random decisions (loss, duplication, delay), so a
	// run's fault decisions are reproducible for a given order of publishes.
	Seed uint64
	// Loss, Duplicate, DelayMin, DelayMax: initial fault settings (see the setters).
	Loss      float64
	Duplicate float64
	DelayMin  time.Duration
	DelayMax  time.Duration
	// QueueLimit bounds each subscription's undelivered messages; beyond it
	// messages are dropped and counted (default 4096).
	QueueLimit int
	Logger     *slog.Logger // nil: silent
}

// Bus is an in-process pub/sub bus with fault injection. Every node gets
// its own Transport from Transport(nodeID); a publish is offered to every
// subscription on the topic, including the publisher's own (loopback), and
// each copy is independently subject to loss, duplication, delay (which
// reorders) and partitions. Fault settings can be changed at any time.
type Bus struct {
	logger     *slog.Logger
	queueLimit int

	mu        sync.Mutex
	rng       *rand.Rand
	loss, dup float64
	dmin      time.Duration
	dmax      time.Duration
	blocked   map[[2]string]bool   // from -> to
	subs      map[string][]*memSub // per topic, in subscription order (deterministic decisions)
	nodes     map[string]*Transport
	closed    bool
}

// NewBus returns an empty bus.
func NewBus(opts Options) *Bus {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = 4096
	}
	b := &Bus{
		logger:     logger,
		queueLimit: opts.QueueLimit,
		rng:        rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		blocked:    map[[2]string]bool{},
		subs:       map[string][]*memSub{},
		nodes:      map[string]*Transport{},
	}
	b.SetLoss(opts.Loss)
	b.SetDuplicate(opts.Duplicate)
	b.SetDelay(opts.DelayMin, opts.DelayMax)
	return b
}

// Transport returns node nodeID's Transport (the same one on every call until
// it is closed; a closed node gets a fresh Transport, like a restarted process).
func (b *Bus) Transport(nodeID string) *Transport {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.nodes[nodeID]; ok {
		return t
	}
	t := &Transport{bus: b, node: nodeID, subs: map[*memSub]struct{}{}}
	if b.closed {
		t.closed = true
	}
	b.nodes[nodeID] = t
	return t
}

// SetLoss sets the probability (0..1) that one delivered copy is lost.
func (b *Bus) SetLoss(p float64) {
	b.mu.Lock()
	b.loss = clamp01(p)
	b.mu.Unlock()
}

// SetDuplicate sets the probability (0..1) that one delivered copy is delivered twice.
func (b *Bus) SetDuplicate(p float64) {
	b.mu.Lock()
	b.dup = clamp01(p)
	b.mu.Unlock()
}

// SetDelay makes each copy wait a uniformly random time in [min, max]
// before delivery; copies may therefore be reordered. Zero means immediate.
func (b *Bus) SetDelay(min, max time.Duration) {
	if min < 0 {
		min = 0
	}
	if max < min {
		max = min
	}
	b.mu.Lock()
	b.dmin, b.dmax = min, max
	b.mu.Unlock()
}

// Block stops delivery from every node in from to every node in to (one way).
func (b *Bus) Block(from, to []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range from {
		for _, t := range to {
			if f != t {
				b.blocked[[2]string{f, t}] = true
			}
		}
	}
}

// Unblock re-allows delivery from every node in from to every node in to.
func (b *Bus) Unblock(from, to []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range from {
		for _, t := range to {
			delete(b.blocked, [2]string{f, t})
		}
	}
}

// Partition blocks delivery both ways between node sets a and b.
func (b *Bus) Partition(a, c []string) {
	b.Block(a, c)
	b.Block(c, a)
}

// Heal removes every partition and block (loss and delay stay as set).
func (b *Bus) Heal() {
	b.mu.Lock()
	clear(b.blocked)
	b.mu.Unlock()
}

// Close closes every node's Transport.
func (b *Bus) Close() error {
	b.mu.Lock()
	b.closed = true
	nodes := make([]*Transport, 0, len(b.nodes))
	for _, t := range b.nodes {
		nodes = append(nodes, t)
	}
	b.mu.Unlock()
	for _, t := range nodes {
		t.Close()
	}
	return nil
}

func clamp01(p float64) float64 { return max(0, min(1, p)) }

// delayLocked draws one delay; b.mu must be held.
func (b *Bus) delayLocked() time.Duration {
	if b.dmax <= 0 {
		return 0
	}
	if b.dmax == b.dmin {
		return b.dmin
	}
	return b.dmin + time.Duration(b.rng.Int64N(int64(b.dmax-b.dmin)+1))
}

func (b *Bus) publish(from string, topic string, payload []byte) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.subs[topic] {
		if s.node.node != from && b.blocked[[2]string{from, s.node.node}] {
			s.node.counters.Dropped.Add(1)
			continue
		}
		if b.loss > 0 && b.rng.Float64() < b.loss {
			s.node.counters.Dropped.Add(1)
			continue
		}
		copies := 1
		if b.dup > 0 && b.rng.Float64() < b.dup {
			copies = 2
		}
		for range copies {
			m := transport.Message{Topic: topic, Payload: append([]byte(nil), payload...)}
			s.enqueue(now.Add(b.delayLocked()), m, b.queueLimit)
		}
	}
}

// Transport is one node's view of a Bus.
type Transport struct {
	bus      *Bus
	node     string
	counters transport.Counters

	mu     sync.Mutex
	subs   map[*memSub]struct{}
	closed bool
	wg     sync.WaitGroup
}

var _ transport.Transport = (*Transport)(nil)

// NodeID returns the node this Transport belongs to.
func (t *Transport) NodeID() string { return t.node }

// Publish offers payload to every subscription on topic (including this
// node's own). Lost or partitioned copies are not errors, as on a real bus.
func (t *Transport) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := ctx.Err(); err != nil {
		t.counters.PublishErrors.Add(1)
		return err
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		t.counters.PublishErrors.Add(1)
		return transport.ErrClosed
	}
	t.bus.publish(t.node, topic, payload)
	t.counters.Published.Add(1)
	return nil
}

// Subscribe registers deliver for topic; it is live when Subscribe returns.
func (t *Transport) Subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return transport.ErrClosed
	}
	s := &memSub{node: t, topic: topic, deliver: deliver, wake: make(chan struct{}, 1), done: make(chan struct{})}
	t.subs[s] = struct{}{}
	t.wg.Add(1)
	t.mu.Unlock()

	t.bus.mu.Lock()
	t.bus.subs[topic] = append(t.bus.subs[topic], s)
	t.bus.mu.Unlock()

	go func() {
		defer t.wg.Done()
		s.run(ctx)
		t.bus.mu.Lock()
		t.bus.subs[topic] = slices.DeleteFunc(t.bus.subs[topic], func(x *memSub) bool { return x == s })
		if len(t.bus.subs[topic]) == 0 {
			delete(t.bus.subs, topic)
		}
		t.bus.mu.Unlock()
		t.mu.Lock()
		delete(t.subs, s)
		t.mu.Unlock()
	}()
	return nil
}

// Stats returns this node's counters. Dropped counts copies addressed to this
// node's subscriptions that fault injection dropped.
func (t *Transport) Stats() transport.Stats { return t.counters.Snapshot() }

// Close stops this node's subscriptions and waits for their goroutines.
// The bus hands out a fresh Transport for the node afterwards.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	for s := range t.subs {
		s.stop()
	}
	t.mu.Unlock()
	t.bus.mu.Lock()
	if t.bus.nodes[t.node] == t {
		delete(t.bus.nodes, t.node)
	}
	t.bus.mu.Unlock()
	t.wg.Wait()
	return nil
}

type memItem struct {
	due time.Time
	seq uint64
	msg transport.Message
}

type memQueue []memItem

func (q memQueue) Len() int { return len(q) }
func (q memQueue) Less(i, j int) bool {
	if q[i].due.Equal(q[j].due) {
		return q[i].seq < q[j].seq
	}
	return q[i].due.Before(q[j].due)
}
func (q memQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *memQueue) Push(x any)   { *q = append(*q, x.(memItem)) }
func (q *memQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

type memSub struct {
	node    *Transport
	topic   string
	deliver func(transport.Message)
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once

	mu  sync.Mutex
	q   memQueue
	seq uint64
}

func (s *memSub) stop() { s.once.Do(func() { close(s.done) }) }

func (s *memSub) enqueue(due time.Time, m transport.Message, limit int) {
	s.mu.Lock()
	if len(s.q) >= limit {
		s.mu.Unlock()
		s.node.counters.Dropped.Add(1)
		return
	}
	s.seq++
	heap.Push(&s.q, memItem{due: due, seq: s.seq, msg: m})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *memSub) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var wait time.Duration = -1
		var msg *transport.Message
		if len(s.q) > 0 {
			if d := time.Until(s.q[0].due); d <= 0 {
				it := heap.Pop(&s.q).(memItem)
				msg = &it.msg
			} else {
				wait = d
			}
		}
		s.mu.Unlock()
		if msg != nil {
			select {
			case <-ctx.Done():
				return
			case <-s.done:
				return
			default:
			}
			s.node.counters.Received.Add(1)
			s.deliver(*msg)
			continue
		}
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-s.wake:
		case <-tc:
		}
	}
}
