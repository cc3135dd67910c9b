package host

import (
	"bytes"
	"context"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
)

// TestNativeAndWasmAgentsInOneSwarm: agents on the native core and agents on
// the wasm module, differing only in the constructor, elect one leader and
// fail over together: the same driver, the same wire.
func TestNativeAndWasmAgentsInOneSwarm(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	rt := testRuntime(t)
	ids := []string{"a", "b", "c"}
	var tas []*testAgent
	for i, id := range ids {
		ta := &testAgent{id: id, tr: bus.Transport(id), rec: &recorder{id: id, leading: map[uint64]bool{}}}
		cfg := AgentConfig{Transport: ta.tr, Logger: discardLogger()}
		var err error
		if i%2 == 0 {
			ta.ag, err = NewNativeAgent(ctx, cfg)
		} else {
			ta.ag, err = rt.NewAgent(ctx, cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer ta.ag.Close(ctx)
		if ta.el, err = ta.ag.Join(ctx, fastConfig(id, "g", ids), ta.rec.callbacks()); err != nil {
			t.Fatal(err)
		}
		tas = append(tas, ta)
	}
	first := waitLeader(t, tas, nil, "")
	first.ag.Close(ctx)
	second := waitLeader(t, tas, map[string]bool{first.id: true}, first.id)
	t.Logf("%s led first, then %s", first.id, second.id)
}

// keepTransport keeps every published payload as it was handed over (a
// transport may send it later) and a copy taken then.
type keepTransport struct {
	quietTransport
	kept, copies [][]byte
	batches      chan struct{}
}

func (k *keepTransport) PublishBatch(ctx context.Context, ms []transport.Message) (int, error) {
	k.mu.Lock()
	for _, m := range ms {
		k.kept = append(k.kept, m.Payload)
		k.copies = append(k.copies, bytes.Clone(m.Payload))
	}
	k.mu.Unlock()
	select {
	case k.batches <- struct{}{}:
	default:
	}
	return len(ms), nil
}

// The native core writes each step's payloads over the last step's; what
// the agent hands its transport stays what it was after later steps.
func TestPublishedPayloadsOutliveTheNextStep(t *testing.T) {
	ctx := context.Background()
	tr := &keepTransport{batches: make(chan struct{}, 1)}
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: tr, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Two groups whose other member is silent campaign again and again, at
	// their own times: steps that publish one after the other.
	for _, g := range []string{"g1", "g2"} {
		if _, err := ag.Join(ctx, core.Config{ID: "a", Group: g, Members: []string{"a", "b"}, HeartbeatMs: 10, ElectionTimeoutMs: 30}, Callbacks{}); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < 10; {
		<-tr.batches
		n++
	}
	ag.Close(ctx)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i := range tr.kept {
		if !bytes.Equal(tr.kept[i], tr.copies[i]) {
			t.Fatalf("published payload %d changed after it was handed over: %s, was %s", i, tr.kept[i], tr.copies[i])
		}
	}
}
