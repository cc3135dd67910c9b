package host

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport"
)

// stepClock is a Clock the test moves.
type stepClock struct{ ms atomic.Int64 }

func (c *stepClock) NowMs() int64 { return c.ms.Load() }

// syncBus is a bus delivered by hand: publishes queue until deliver hands
// them, copied as a network would, to every subscriber of their topic (the
// publisher's own included, as NATS does).
type syncBus struct {
	mu    sync.Mutex
	subs  map[string][]func(transport.Message)
	queue []transport.Message
}

type syncNode struct{ bus *syncBus }

func (n syncNode) Publish(ctx context.Context, topic string, payload []byte) error {
	_, err := n.PublishBatch(ctx, []transport.Message{{Topic: topic, Payload: payload}})
	return err
}

func (n syncNode) PublishBatch(ctx context.Context, ms []transport.Message) (int, error) {
	n.bus.mu.Lock()
	for _, m := range ms {
		n.bus.queue = append(n.bus.queue, transport.Message{Topic: m.Topic, Payload: append([]byte(nil), m.Payload...)})
	}
	n.bus.mu.Unlock()
	return len(ms), nil
}

func (n syncNode) Subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	n.bus.mu.Lock()
	defer n.bus.mu.Unlock()
	if n.bus.subs == nil {
		n.bus.subs = map[string][]func(transport.Message){}
	}
	n.bus.subs[topic] = append(n.bus.subs[topic], deliver)
	return nil
}

func (n syncNode) Stats() transport.Stats { return transport.Stats{} }
func (n syncNode) Close() error           { return nil }

// deliver hands every queued message to its subscribers and reports how
// many it delivered.
func (b *syncBus) deliver() int {
	b.mu.Lock()
	q := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, m := range q {
		b.mu.Lock()
		subs := b.subs[m.Topic]
		b.mu.Unlock()
		for _, d := range subs {
			d(m)
		}
	}
	return len(q)
}

// steadySwarm is three agents (native, or on the module with wasm), each a
// member of every one of n groups, over a syncBus, with their loops
// stopped: tick drives them.
type steadySwarm struct {
	clock  *stepClock
	bus    *syncBus
	agents []*Agent
	els    [][]*Election
}

func newSteadySwarm(tb testing.TB, n int, rt *testRT) *steadySwarm {
	ctx := context.Background()
	s := &steadySwarm{clock: &stepClock{}, bus: &syncBus{}}
	s.clock.ms.Store(1)
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		cfg := AgentConfig{Transport: syncNode{s.bus}, Logger: discardLogger(), Clock: s.clock}
		var ag *Agent
		var err error
		if rt != nil {
			ag, err = rt.NewAgent(ctx, cfg)
		} else {
			ag, err = NewNativeAgent(ctx, cfg)
		}
		if err != nil {
			tb.Fatal(err)
		}
		specs := make([]JoinSpec, n)
		for i := range specs {
			specs[i] = JoinSpec{Config: core.Config{ID: id, Group: fmt.Sprintf("group-%05d", i), Members: ids, BalancedPriority: true}}
		}
		els, errs := ag.JoinAll(ctx, specs)
		for _, err := range errs {
			if err != nil {
				tb.Fatal(err)
			}
		}
		// The loop stopped: tick steps the agent (Close stops it again).
		close(ag.stop)
		<-ag.done
		ag.stop = make(chan struct{})
		s.agents = append(s.agents, ag)
		s.els = append(s.els, els)
	}
	tb.Cleanup(func() {
		for _, ag := range s.agents {
			ag.Close(ctx)
		}
	})
	return s
}

// tick moves the clock by ms and runs every agent until nothing is left to
// deliver: what a loop would do in that time on an idle machine.
func (s *steadySwarm) tick(ms int64) {
	ctx := context.Background()
	s.clock.ms.Add(ms)
	for round := 0; ; round++ {
		for _, ag := range s.agents {
			for more := true; more; {
				more = ag.step()
				ag.checkLeases()
			}
			ag.pub.waitIdle(ctx)
		}
		if s.bus.deliver() == 0 && round > 0 {
			return
		}
	}
}

// settled reports whether every group has one leader that every agent
// knows.
func (s *steadySwarm) settled() bool {
	for i := range s.els[0] {
		leader := s.els[0][i].Status().Leader
		if leader == "" {
			return false
		}
		for _, els := range s.els[1:] {
			if els[i].Status().Leader != leader {
				return false
			}
		}
	}
	return true
}

// settle steps the swarm until every group is led and known (elections,
// then priority hand-offs: about two election timeouts of steady contact),
// then 10 s more, quiet.
func (s *steadySwarm) settle(tb testing.TB) {
	tb.Helper()
	for t := 0; !s.settled(); t++ {
		if t > 3000 {
			tb.Fatal("not settled within 60 s of swarm time")
		}
		s.tick(20)
	}
	for range 500 {
		s.tick(20)
	}
}

// BenchmarkSwarmSteady is the CPU of a settled swarm: three agents (native;
// wasm-n: on the module) in every one of n groups (default timings, balanced priorities) over a
// bus without cost, stepped every 20 ms as an agent's aligned wake-ups do.
// One op is one heartbeat interval (500 ms) of all three agents: every
// leader's heartbeats, every follower's acks, in envelopes, through the
// host (delivery, envelopes, inbox, core, coalescer, publisher). The
// cpu%/agent metric is an agent's share of one core at that pace, without
// the bus client, the broker or the scheduler's hand-offs of a real
// process.
func BenchmarkSwarmSteady(b *testing.B) {
	for _, run := range []struct {
		name string
		n    int
		wasm bool
	}{{"1000", 1000, false}, {"10000", 10000, false}, {"wasm-1000", 1000, true}} {
		b.Run(run.name, func(b *testing.B) {
			var rt *testRT
			if run.wasm {
				rt = testRuntime(b)
			}
			s := newSteadySwarm(b, run.n, rt)
			s.settle(b)
			var in0 uint64
			for _, ag := range s.agents {
				in0 += ag.c.in.Load()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for range 25 {
					s.tick(20)
				}
			}
			b.StopTimer()
			var in uint64
			for _, ag := range s.agents {
				in += ag.c.in.Load()
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(perOp/3/500e6*100, "cpu%/agent")
			b.ReportMetric(float64(in-in0)/float64(b.N)/3, "payloads/agent/op")
			if !s.settled() {
				b.Fatal("a group lost its leader during the benchmark")
			}
		})
	}
}
