package host

import (
	"context"
	"testing"

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
