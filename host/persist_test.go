package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// flakyStore fails every Save while fail is set.
type flakyStore struct {
	fail  atomic.Bool
	saves atomic.Int64
	mem   *statestore.Mem
}

func (s *flakyStore) Save(name string, b []byte) error {
	if s.fail.Load() {
		return errors.New("disk full")
	}
	s.saves.Add(1)
	return s.mem.Save(name, b)
}

func (s *flakyStore) Load(name string) ([]byte, error) { return s.mem.Load(name) }

// TestSaveFailureHoldsPublishes: while the store fails, the agent publishes
// nothing of the group — not in the failing batch, not in later ones: a
// vote or claim must never leave before it is durable — and once a save
// succeeds it resumes, its state durable.
func TestSaveFailureHoldsPublishes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	b := bus.Transport("b")
	var mu sync.Mutex
	var seen []string
	go b.Subscribe(ctx, core.Topic("g"), func(m transport.Message) {
		if !strings.Contains(string(m.Payload), `"from":"a"`) {
			return // b's own message, echoed
		}
		mu.Lock()
		seen = append(seen, string(m.Payload))
		mu.Unlock()
	})
	store := &flakyStore{mem: statestore.NewMem()} // a Store of the test's own
	store.fail.Store(true)
	ta := &topicCounter{Transport: bus.Transport("a")}
	ag, err := testRuntime(t).NewAgent(ctx, AgentConfig{Transport: ta, Store: store, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	if _, err := ag.Join(ctx, core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}, HeartbeatMs: 20, ElectionTimeoutMs: 100}, Callbacks{}); err != nil {
		t.Fatal(err)
	}
	// b asks for a's vote; a grants it in memory, but may not say so.
	if err := b.Publish(ctx, core.Topic("g"), []byte(`{"type":"election","group":"g","from":"b","candidate":"b","priority":1,"term":1}`)); err != nil {
		t.Fatal(err)
	}
	// Three held batches (the grant, then campaigns at each election
	// timeout), each after a failed save: a had things to say three times.
	transporttest.WaitFor(t, "three held publishes", func() bool {
		st := ag.Stats()
		return st.HeldPublishes >= 3 && st.PersistErrors >= 3
	})
	mu.Lock()
	n := len(seen)
	mu.Unlock()
	// (Only the group's topic: an empty envelope on the peer topic, which
	// says a reads envelopes, carries nothing of the group.)
	if out := ta.published(core.Topic("g")); n != 0 || out != 0 {
		t.Fatalf("with saves failing: a published %d, %d seen, stats %+v", out, n, ag.Stats())
	}
	store.fail.Store(false)
	transporttest.WaitForWithin(t, time.Minute, "a publish after the store recovered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0
	})
	if store.saves.Load() == 0 {
		t.Fatal("a published with no save since the store recovered")
	}
}

// scriptedCore is the native core whose next Output also carries the events
// a test queued: the agent's own loop applies them, as it would the core's,
// so the test drives the host's handling of events without touching the
// loop's state from its own goroutine.
type scriptedCore struct {
	nativeCore
	mu   sync.Mutex
	next []core.Event
}

func (s *scriptedCore) Step(in *core.Input, out *core.Output) error {
	if err := s.nativeCore.Step(in, out); err != nil {
		return err
	}
	s.mu.Lock()
	out.Events = append(out.Events, s.next...)
	s.next = nil
	s.mu.Unlock()
	return nil
}

// inject has a's loop apply evs in its next step.
func (s *scriptedCore) inject(a *Agent, evs ...core.Event) {
	s.mu.Lock()
	s.next = append(s.next, evs...)
	s.mu.Unlock()
	a.wake()
}

// joinScripted joins ag to group g as a, with timers an hour away (the core
// itself says nothing while the test speaks for it through a scriptedCore),
// and returns the record of its callbacks and the markers OnNewLeader
// sends: callbacks run in order, so when the marker after an Output's
// events is seen, a leadership those events started and stopped has been
// reported stopped.
func joinScripted(t *testing.T, ag *Agent) (*recorder, chan string) {
	t.Helper()
	rec := &recorder{id: "a", leading: map[uint64]bool{}}
	cb := rec.callbacks()
	marks := make(chan string, 4)
	cb.OnNewLeader = func(leader string, term uint64) { marks <- fmt.Sprintf("%s@%d", leader, term) }
	cfg := core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}, HeartbeatMs: 600_000, ElectionTimeoutMs: 1_800_000}
	if _, err := ag.Join(context.Background(), cfg, cb); err != nil {
		t.Fatal(err)
	}
	return rec, marks
}

// TestRevokedLeadershipNeverStarts: a became-leader followed by a
// stepped-down in the same Output starts no OnStartedLeading; a
// became-leader alone does.
func TestRevokedLeadershipNeverStarts(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	sc := &scriptedCore{nativeCore: nativeCore{e: core.NewEngine()}}
	ag := startAgent(AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger()}, sc)
	defer ag.Close(ctx)
	rec, marks := joinScripted(t, ag)
	far := ag.clock.NowMs() + 3_600_000
	sc.inject(ag,
		core.Event{Kind: core.EventBecameLeader, Group: "g", Term: 5, Leader: "a", LeaseUntil: far},
		core.Event{Kind: core.EventLease, Group: "g", Term: 5, Leader: "a", LeaseUntil: far + 1},
		core.Event{Kind: core.EventSteppedDown, Group: "g", Term: 5, Reason: "a higher term began"},
		core.Event{Kind: core.EventLeaderChanged, Group: "g", Term: 6, Leader: "b"})
	select {
	case m := <-marks:
		if m != "b@6" {
			t.Fatalf("marker %q", m)
		}
	case <-time.After(time.Minute):
		t.Fatal("the injected events were not applied")
	}
	rec.mu.Lock()
	started, stopped := len(rec.started), strings.Join(rec.stopped, ",")
	rec.mu.Unlock()
	if started != 0 || stopped != "" {
		t.Fatalf("revoked leadership: started %d, stopped %q", started, stopped)
	}
	sc.inject(ag, core.Event{Kind: core.EventBecameLeader, Group: "g", Term: 7, Leader: "a", LeaseUntil: far})
	transporttest.WaitForWithin(t, time.Minute, "a lasting leadership to start", rec.isLeading)
}

// topicCounter counts a transport's successful publishes by topic.
type topicCounter struct {
	transport.Transport
	mu sync.Mutex
	n  map[string]int
}

func (c *topicCounter) Publish(ctx context.Context, topic string, payload []byte) error {
	err := c.Transport.Publish(ctx, topic, payload)
	if err == nil {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[topic]++
		c.mu.Unlock()
	}
	return err
}

func (c *topicCounter) published(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[topic]
}

// steppedClock is a Clock the test moves: from the scripted core's Step, so
// that a step's events see the time it sets.
type steppedClock struct{ ms atomic.Int64 }

func (c *steppedClock) NowMs() int64 { return c.ms.Load() }

// clockedCore is a scriptedCore that also sets the clock (at, if set) in
// the step that applies the injected events, before they are applied.
type clockedCore struct {
	scriptedCore
	clock *steppedClock
	at    atomic.Int64 // 0: leave the clock alone
}

func (c *clockedCore) Step(in *core.Input, out *core.Output) error {
	c.mu.Lock()
	if len(c.next) > 0 { // the step that applies the injected events
		if ms := c.at.Swap(0); ms != 0 {
			c.clock.ms.Store(ms)
		}
	}
	c.mu.Unlock()
	return c.scriptedCore.Step(in, out)
}

// TestLeaseRegainedAfterItsEndRestartsLeading: a lease of the same term
// that arrives after the previous one ended, in a step before the loop
// noticed that end, stops the application's leadership and starts it
// again; it must not carry the leadership silently across the gap, in
// which the leader held no lease.
func TestLeaseRegainedAfterItsEndRestartsLeading(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	clock := &steppedClock{}
	clock.ms.Store(1_000)
	cc := &clockedCore{scriptedCore: scriptedCore{nativeCore: nativeCore{e: core.NewEngine()}}, clock: clock}
	ag := startAgent(AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger(), Clock: clock}, cc)
	defer ag.Close(ctx)
	rec, marks := joinScripted(t, ag)
	mark := func(want string) {
		t.Helper()
		select {
		case m := <-marks:
			if m != want {
				t.Fatalf("marker %q, want %q", m, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the injected events were not applied (marker %s)", want)
		}
	}
	cc.inject(ag,
		core.Event{Kind: core.EventBecameLeader, Group: "g", Term: 5, Leader: "a", LeaseUntil: 2_000},
		core.Event{Kind: core.EventLeaderChanged, Group: "g", Term: 5, Leader: "a"})
	mark("a@5")
	// The next step comes after the lease's end and brings a new lease of
	// term 5 (acks of a later heartbeat), with the end not yet handled.
	cc.at.Store(3_000)
	cc.inject(ag,
		core.Event{Kind: core.EventLease, Group: "g", Term: 5, Leader: "a", LeaseUntil: 4_000},
		core.Event{Kind: core.EventLeaderChanged, Group: "g", Term: 5, Leader: "marker"})
	mark("marker@5")
	rec.mu.Lock()
	stopped := strings.Join(rec.stopped, ",")
	rec.mu.Unlock()
	if stopped != "5:lease expired" {
		t.Fatalf("stopped %q, want the first lease of term 5 ended (5:lease expired)", stopped)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		rec.mu.Lock()
		started := fmt.Sprint(rec.started)
		rec.mu.Unlock()
		if started == "[5 5]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("started %s, want term 5 started again on its new lease", started)
		}
	}
}
