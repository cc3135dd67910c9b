package host

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/wasmhost"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// syncedStore is a store whose every Save takes as long as a small file
// written and fsynced (statestore's), once it is slowed.
type syncedStore struct {
	*statestore.Mem
	slow atomic.Bool
}

func (s *syncedStore) Save(name string, data []byte) error {
	if s.slow.Load() {
		time.Sleep(8 * time.Millisecond) // the cost being modelled, not a wait
	}
	return s.Mem.Save(name, data)
}

// A module instance re-made after a trap, in a swarm of many groups whose
// leaders are alive, starts no campaign per group. Every re-join raises
// the group's epoch, and the host saved each new state before going on:
// with a store that syncs every save (8 ms here), an agent re-joining 300
// groups spent longer than an election timeout saving, and every group it
// then stepped found its campaign overdue and ran it (114 and 124
// campaigns in two runs; 600 groups at 4 ms: 462–565). Without
// authentication the epoch is never sent, so such a state is not saved
// again (Engine.mustPersist). Not run under -race (RACE_SKIP): at the race
// lane's load the three agents' 300 groups do not always settle in time.
func TestRestoreAfterTrapKeepsFollowing(t *testing.T) {
	const groups = 300
	ctx := context.Background()
	r := testRuntime(t)
	bus := mem.NewBus(mem.Options{Seed: 11, DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond, QueueLimit: 1 << 16})
	t.Cleanup(func() { bus.Close() })
	ids := []string{"r1", "r2", "r3"}
	ags := make([]*Agent, len(ids))
	els := make([][]*Election, len(ids))
	store := &syncedStore{Mem: statestore.NewMem()}
	for k, id := range ids {
		cfg := AgentConfig{Transport: bus.Transport(id), Logger: discardLogger()}
		if k == 2 {
			cfg.Store = store
		}
		ag, err := r.NewAgent(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ag.Close(ctx) })
		ags[k] = ag
		specs := make([]JoinSpec, groups)
		for i := range specs {
			// r3 has the lowest priority: it leads no group, so every
			// group's leader is alive when its instance is re-made.
			specs[i] = JoinSpec{Config: core.Config{ID: id, Group: fmt.Sprintf("rg%03d", i), Members: ids,
				Priority: uint32(30 - 10*k), HeartbeatMs: 250, ElectionTimeoutMs: 1500}}
		}
		var errs []error
		els[k], errs = ag.JoinAll(ctx, specs)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// followed reports whether every agent follows one leader, not r3, in
	// every group.
	followed := func() bool {
		for i := range groups {
			l := els[0][i].Status().Leader
			if l == "" || l == "r3" || els[1][i].Status().Leader != l || els[2][i].Status().Leader != l {
				return false
			}
		}
		return true
	}
	transporttest.WaitForWithin(t, 2*time.Minute, "every group led and known", followed)
	campaigns := func() (n uint64) {
		for k := range 2 { // r3's counters restart with its instance
			for _, el := range els[k] {
				n += el.Status().Elections
			}
		}
		return n
	}
	before := campaigns()
	store.slow.Store(true)
	ags[2].eng.(*wasmhost.Engine).InjectTrap()
	transporttest.WaitForWithin(t, time.Minute, "the trap", func() bool { return ags[2].Stats().Traps > 0 })
	// The restored agent has stepped what it saved and what arrived since
	// once it knows a leader, not itself, in every group: its campaigns are
	// counted by then (a storm's come first, from the overdue timers).
	transporttest.WaitForWithin(t, 2*time.Minute, "r3 to know a leader in every group after the trap", func() bool {
		for i := range groups {
			if l := els[2][i].Status().Leader; l == "" || l == "r3" {
				return false
			}
		}
		return true
	})
	var r3 uint64
	for _, el := range els[2] {
		r3 += el.Status().Elections
	}
	n := campaigns() - before + r3
	t.Logf("campaigns from the trap until r3 knew every leader: %d in %d groups (r3: %d)", n, groups, r3)
	if n > groups/10 {
		t.Fatalf("%d campaigns in %d groups after the trap of an agent that led none: an election storm", n, groups)
	}
}
