package host

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport/mem"
)

// gatedEngine holds every step with received messages until gate is
// closed, and records whether each said that more waited (Input.Backlog).
// held receives once, when the first such step is held.
type gatedEngine struct {
	Engine
	gate    chan struct{}
	held    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	backlog []bool
	in      int
}

func (g *gatedEngine) Step(in *core.Input, out *core.Output) error {
	if len(in.Inbound) > 0 {
		g.once.Do(func() { close(g.held) })
		<-g.gate
		g.mu.Lock()
		g.backlog = append(g.backlog, in.Backlog)
		g.in += len(in.Inbound)
		g.mu.Unlock()
	}
	return g.Engine.Step(in, out)
}

// TestBacklogToldToCore: when the inbox holds more than one batch takes,
// the agent tells the core (Input.Backlog) on every batch but the one that
// empties it, so a campaign due meanwhile waits for the rest (the
// backlog_holds_campaign transcript).
func TestBacklogToldToCore(t *testing.T) {
	bus := mem.NewBus(mem.Options{Seed: 9})
	t.Cleanup(func() { bus.Close() })
	ctx := context.Background()
	eng := &gatedEngine{Engine: &nativeCore{e: core.NewEngine()}, gate: make(chan struct{}), held: make(chan struct{})}
	ag, err := NewAgentOn(AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger()}, eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ag.Close(ctx) })
	if _, err := ag.Join(ctx, core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}, Callbacks{}); err != nil {
		t.Fatal(err)
	}
	// One message first, held in its step at the gate: the loop would
	// otherwise take a batch while the rest are still arriving, which may
	// leave too few behind to need a second batch. Then 100 messages of
	// 8,000 bytes: 800 kB, more than a batch takes (core.MaxBatchBytes/2).
	// The core refuses them; only the batching matters here.
	other := bus.Transport("x")
	payload := []byte(strings.Repeat("x", 8000))
	if err := other.Publish(ctx, core.Topic("g"), payload); err != nil {
		t.Fatal(err)
	}
	<-eng.held
	const n = 101
	for range n - 1 {
		if err := other.Publish(ctx, core.Topic("g"), payload); err != nil {
			t.Fatal(err)
		}
	}
	for ag.Stats().Transport.Received < n {
		time.Sleep(5 * time.Millisecond) // the steps are held: they arrive
	}
	close(eng.gate)
	for {
		eng.mu.Lock()
		got, backlog := eng.in, append([]bool(nil), eng.backlog...)
		eng.mu.Unlock()
		if got == n {
			if !slices.Contains(backlog, true) || backlog[len(backlog)-1] {
				t.Fatalf("Backlog of the steps with messages: %v; want true while more waited, false on the last", backlog)
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
