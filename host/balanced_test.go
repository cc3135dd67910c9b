package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// TestBalancedPriorityThroughModule: three agents on the module join nine
// groups with core.Config.BalancedPriority; each announces the rendezvous
// priority of (group, id), and every group ends up led by its best member by
// that order, so the leadership is not all one agent's.
func TestBalancedPriorityThroughModule(t *testing.T) {
	bus := mem.NewBus(mem.Options{Seed: 5, DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond})
	t.Cleanup(func() { bus.Close() })
	ctx := context.Background()
	r := testRuntime(t)
	ids := []string{"a1", "a2", "a3"}
	const groups = 9
	els := make([][]*Election, len(ids)) // els[agent][group]
	for i, id := range ids {
		ag, err := r.NewAgent(ctx, AgentConfig{Transport: bus.Transport(id), Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ag.Close(ctx) })
		for g := range groups {
			c := fastConfig(id, fmt.Sprintf("g%d", g), ids)
			c.BalancedPriority = true
			el, err := ag.Join(ctx, c, Callbacks{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := el.Status().Priority, core.RendezvousPriority(c.Group, id); got != want {
				t.Fatalf("%s in %s: priority %d, want the rendezvous priority %d", id, c.Group, got, want)
			}
			els[i] = append(els[i], el)
		}
	}
	led := map[string]int{}
	for g := range groups {
		group := fmt.Sprintf("g%d", g)
		best := ids[0]
		for _, id := range ids[1:] {
			if core.RendezvousPriority(group, id) > core.RendezvousPriority(group, best) {
				best = id
			}
		}
		led[best]++
		// Wait until every agent names best as the leader (a first winner
		// other than best would hand over to it).
		for i := range ids {
			transporttest.WaitFor(t, fmt.Sprintf("%s to name %s leader of %s", ids[i], best, group), func() bool {
				return els[i][g].Status().Leader == best
			})
		}
	}
	if len(led) < 2 {
		t.Fatalf("one agent leads every group: %v", led)
	}
	t.Logf("leaders per agent: %v", led)
}
