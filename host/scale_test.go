package host

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/transporttest"
)

// quietTransport records subscriptions and publishes and starts no
// goroutine of its own, so that an agent's goroutines can be counted.
type quietTransport struct {
	mu      sync.Mutex
	subs    map[string]func(transport.Message)
	batches [][]transport.Message
	singles int
}

func (q *quietTransport) Publish(ctx context.Context, topic string, payload []byte) error {
	q.mu.Lock()
	q.singles++
	q.mu.Unlock()
	return nil
}

func (q *quietTransport) Subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.subs == nil {
		q.subs = map[string]func(transport.Message){}
	}
	q.subs[topic] = deliver
	return nil
}

func (q *quietTransport) Stats() transport.Stats { return transport.Stats{} }
func (q *quietTransport) Close() error           { return nil }

// batchTransport is a quietTransport that publishes in batches.
type batchTransport struct{ quietTransport }

func (b *batchTransport) PublishBatch(ctx context.Context, ms []transport.Message) (int, error) {
	b.mu.Lock()
	b.batches = append(b.batches, append([]transport.Message(nil), ms...))
	b.mu.Unlock()
	return len(ms), nil
}

// An idle election costs no goroutine: its callbacks run on one that
// exists only while some are queued.
func TestIdleElectionsCostNoGoroutine(t *testing.T) {
	ctx := context.Background()
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: &quietTransport{}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	base := runtime.NumGoroutine()
	const n = 200
	var led atomic.Int32
	all := make(chan struct{})
	for i := range n {
		// A group of one elects itself after its election timeout.
		_, err := ag.Join(ctx, core.Config{ID: "solo", Group: fmt.Sprintf("g%d", i), Members: []string{"solo"}, HeartbeatMs: 20, ElectionTimeoutMs: 100},
			Callbacks{OnNewLeader: func(string, uint64) {
				if led.Add(1) == n {
					close(all)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	<-all // every election has run a callback
	transporttest.WaitForWithin(t, time.Minute, fmt.Sprintf("at most %d goroutines with %d idle elections (%d before they joined)", base+n/10, n, base), func() bool {
		return runtime.NumGoroutine() <= base+n/10
	})
}

// A step's publishes reach a batching transport together, in the core's
// order, not one Publish each.
func TestPublishesGoOutInBatches(t *testing.T) {
	ctx := context.Background()
	tr := &batchTransport{}
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: tr, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	// Ten groups of two (the other member silent) campaign after the
	// same timeout, so one step publishes several pre-vote requests.
	const n = 10
	for i := range n {
		if _, err := ag.Join(ctx, core.Config{ID: "a", Group: fmt.Sprintf("g%d", i), Members: []string{"a", "b"}, HeartbeatMs: 20, ElectionTimeoutMs: 100, Seed: 1}, Callbacks{}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.WaitForWithin(t, time.Minute, "a batch of more than one message", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.singles > 0 {
			t.Fatalf("%d messages published one by one to a transport that batches", tr.singles)
		}
		for _, b := range tr.batches {
			if len(b) > 1 {
				return true
			}
		}
		return false
	})
}

// An agent in fewer groups than it coalesces for reads and writes no peer
// topic: its traffic is exactly that of an agent without coalescing. From
// that number on it subscribes to its groups' peer topic.
func TestFewGroupsUseNoPeerTopic(t *testing.T) {
	ctx := context.Background()
	tr := &quietTransport{}
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: tr, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	peerSubs := func() (n int) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for topic := range tr.subs {
			if strings.HasPrefix(topic, PeersTopicPrefix) {
				n++
			}
		}
		return n
	}
	members := []string{"a", "b", "c"}
	for i := range coalesceGroups {
		if n := peerSubs(); n != 0 {
			t.Fatalf("in %d groups: %d peer topics subscribed", i, n)
		}
		if _, err := ag.Join(ctx, core.Config{ID: "a", Group: fmt.Sprintf("g%d", i), Members: members}, Callbacks{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := peerSubs(); n != 1 {
		t.Fatalf("in %d groups of one member set: %d peer topics subscribed, want 1", coalesceGroups, n)
	}
}

// BenchmarkAgentMemoryPerGroup reports the Go heap a native agent holds
// per group just joined (3 members, the other two silent), with everything
// the host keeps for it: election, inbox and coalescer entries, the core's
// group. (Goroutine stacks are not heap: an idle election has none.)
func BenchmarkAgentMemoryPerGroup(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				ctx := context.Background()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ag, err := NewNativeAgent(ctx, AgentConfig{Transport: &quietTransport{}, Logger: discardLogger()})
				if err != nil {
					b.Fatal(err)
				}
				sem := make(chan struct{}, 256)
				var wg sync.WaitGroup
				for i := range n {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer func() { <-sem; wg.Done() }()
						ag.Join(ctx, core.Config{ID: "a", Group: fmt.Sprintf("group-%05d", i), Members: []string{"a", "b", "c"}}, Callbacks{})
					}()
				}
				wg.Wait()
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(n), "heap-B/group")
				ag.Close(ctx)
			}
		})
	}
}

// BenchmarkEnvelopeIn is the host's cost of one received envelope of 1,000
// heartbeats, one for each group joined, up to the inbox (the core's step
// not included): the part of a follower's CPU that grows with its groups
// besides the core's own.
func BenchmarkEnvelopeIn(b *testing.B) {
	ctx := context.Background()
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: &quietTransport{}, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer ag.Close(ctx)
	const n = 1000
	specs := make([]JoinSpec, n)
	entries := make([]envEntry, n)
	for i := range specs {
		g := fmt.Sprintf("group-%05d", i)
		specs[i] = JoinSpec{Config: core.Config{ID: "a", Group: g, Members: []string{"a", "b", "c"}}}
		entries[i] = envEntry{Group: g, Payload: []byte(`{"type":"heartbeat","group":"` + g + `","from":"b","inc":8361723561232,"leader":"b","priority":2147483648,"term":3,"seq":1234,"wall":1764640000000,"conf_term":1,"conf_index":1,"committed":true}`)}
	}
	if _, errs := ag.JoinAll(ctx, specs); errs[0] != nil {
		b.Fatal(errs[0])
	}
	env := transport.Message{Topic: PeersTopic([]string{"a", "b", "c"}), Payload: appendEnvelope(nil, "b", entries)}
	// The loop stopped, so that only the delivery is measured (Close
	// stops it again).
	close(ag.stop)
	<-ag.done
	ag.stop = make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ag.deliverEnvelope(env)
		ag.mu.Lock()
		for ag.inbox.len() > 0 {
			ag.inbox.take(core.MaxBatchBytes / 2)
		}
		ag.mu.Unlock()
	}
}
