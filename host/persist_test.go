package host

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
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
// nothing of the group — not in the failing batch, not in later ones (issue
// 9, defect 5) — and once a save succeeds it resumes, its state durable.
func TestSaveFailureHoldsPublishes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bus := transport.NewMemBus(transport.MemOptions{})
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
	ag, err := testRuntime(t).NewAgent(ctx, AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	store := &flakyStore{mem: statestore.NewMem()}
	store.fail.Store(true)
	ag.store = store // before Join: the loop reads it only after Join's request
	if _, err := ag.Join(ctx, core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}, HeartbeatMs: 20, ElectionTimeoutMs: 100}, Callbacks{}); err != nil {
		t.Fatal(err)
	}
	// b asks for a's vote; a grants it in memory, but may not say so.
	time.Sleep(50 * time.Millisecond)
	if err := b.Publish(ctx, core.Topic("g"), []byte(`{"type":"election","group":"g","from":"b","candidate":"b","priority":1,"term":1}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // several election timeouts: a would campaign
	mu.Lock()
	n := len(seen)
	mu.Unlock()
	st := ag.Stats()
	if n != 0 || st.HeldPublishes == 0 || st.PersistErrors == 0 {
		t.Fatalf("with saves failing: %d publishes seen, stats %+v", n, st)
	}
	store.fail.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n = len(seen)
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n == 0 || store.saves.Load() == 0 {
		t.Fatalf("no publish after the store recovered (saves %d)", store.saves.Load())
	}
}

// TestRevokedLeadershipNeverStarts: a became-leader followed by a
// stepped-down in the same Output starts no OnStartedLeading (issue 9,
// defect 7c); a became-leader alone does.
func TestRevokedLeadershipNeverStarts(t *testing.T) {
	ctx := context.Background()
	bus := transport.NewMemBus(transport.MemOptions{})
	defer bus.Close()
	ag, err := testRuntime(t).NewAgent(ctx, AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	rec := &recorder{id: "a", leading: map[uint64]bool{}}
	// Timers an hour away: the agent's loop stays idle while the test
	// applies Outputs itself.
	cfg := core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}, HeartbeatMs: 600_000, ElectionTimeoutMs: 1_800_000}
	if _, err := ag.Join(ctx, cfg, rec.callbacks()); err != nil {
		t.Fatal(err)
	}
	far := ag.clock.NowMs() + 3_600_000
	ag.apply(&core.Output{Events: core.Events{
		{Kind: core.EventBecameLeader, Group: "g", Term: 5, Leader: "a", LeaseUntil: far},
		{Kind: core.EventLease, Group: "g", Term: 5, Leader: "a", LeaseUntil: far + 1},
		{Kind: core.EventSteppedDown, Group: "g", Term: 5, Reason: "a higher term began"},
	}}, &core.Input{}, nil)
	time.Sleep(100 * time.Millisecond)
	rec.mu.Lock()
	started, stopped := len(rec.started), strings.Join(rec.stopped, ",")
	rec.mu.Unlock()
	if started != 0 || stopped != "" {
		t.Fatalf("revoked leadership: started %d, stopped %q", started, stopped)
	}
	ag.apply(&core.Output{Events: core.Events{{Kind: core.EventBecameLeader, Group: "g", Term: 6, Leader: "a", LeaseUntil: far}}}, &core.Input{}, nil)
	time.Sleep(100 * time.Millisecond)
	if !rec.isLeading() {
		t.Fatal("a lasting leadership did not start")
	}
}
