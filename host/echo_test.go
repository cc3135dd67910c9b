package host

import (
	"context"
	"fmt"
	"testing"

	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// The bus echoes an agent's publishes back to it; those copies are
// dropped on arrival, not handed to the core. An agent alone in its groups
// (the other member silent) hands its core nothing while it campaigns.
func TestOwnEchoesNotHandedToTheCore(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	for i := range 3 {
		if _, err := ag.Join(ctx, fastConfig("a", fmt.Sprintf("g%d", i), []string{"a", "b"}), Callbacks{}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.WaitFor(t, "campaigns echoed back", func() bool { return ag.Stats().Echoes >= 6 })
	if st := ag.Stats(); st.MessagesIn != 0 {
		t.Fatalf("the core was handed %d messages; nobody but the agent itself spoke (%d echoes)", st.MessagesIn, st.Echoes)
	}
}

// Envelopes echoed back are dropped too: what an agent unwraps from
// envelopes is all its peer's.
func TestOwnEnvelopesNotUnwrapped(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	ids := []string{"a", "b"}
	var ags []*Agent
	for _, id := range ids {
		ag, err := NewNativeAgent(ctx, AgentConfig{Transport: bus.Transport(id), Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer ag.Close(ctx)
		specs := make([]JoinSpec, coalesceGroups)
		for i := range specs {
			specs[i] = JoinSpec{Config: fastConfig(id, fmt.Sprintf("g%02d", i), ids)}
		}
		if _, errs := ag.JoinAll(ctx, specs); errs[0] != nil {
			t.Fatal(errs[0])
		}
		ags = append(ags, ag)
	}
	transporttest.WaitFor(t, "both send heartbeats or acks in envelopes", func() bool {
		return ags[0].Stats().Coalesced > 100 && ags[1].Stats().Coalesced > 100
	})
	// Read in this order, a's unwrapped count can only be behind b's sent.
	in := ags[0].Stats().CoalescedIn
	if sent := ags[1].Stats().Coalesced; in > sent {
		t.Fatalf("a unwrapped %d payloads from envelopes, b sent %d: a unwrapped its own", in, sent)
	}
}
