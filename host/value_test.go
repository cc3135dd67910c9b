package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// valueSeen is an agent's last OnValue report.
type valueSeen struct {
	leader, value string
	term          uint64
}

// Every agent learns the leader's value through OnValue and Status, a
// proclaim reaches the followers without a new term, and a proclaim that
// the core refuses (not the leader, a bad value) fails.
//
// A lease lost to load ends a leadership before every agent heard its
// value (a CI race lane at load 31: a and b reported b's value in term 1,
// c never did). The checks follow the leadership every agent reports: a
// leader's value is the one it was started with or last proclaimed, and a
// proclaim whose leadership ended before every agent reported it is made
// again under the next one, at most three times.
func TestValueAndProclaim(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{Seed: 5, DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond})
	r := testRuntime(t)
	ids := []string{"a", "b", "c"}
	var mu sync.Mutex
	last := map[string]valueSeen{}
	els := map[string]*Election{}
	for _, id := range ids {
		ag, err := r.NewAgent(ctx, AgentConfig{Transport: bus.Transport(id), Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ag.Close(ctx) })
		cfg := fastConfig(id, "g", ids)
		// A lease of about a second: the test needs one leadership
		// throughout (a proclaim makes no new term), also under -race on
		// a loaded machine, where a 100 ms lease is lost to scheduling.
		cfg.HeartbeatMs, cfg.ElectionTimeoutMs = 100, 1000
		cfg.Value = "http://" + id + ".example:8080"
		el, err := ag.Join(ctx, cfg, Callbacks{OnValue: func(leader string, term uint64, value string) {
			mu.Lock()
			last[id] = valueSeen{leader, value, term}
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		els[id] = el
	}
	// agreed returns the report every agent made last, if they agree.
	agreed := func() (valueSeen, bool) {
		mu.Lock()
		defer mu.Unlock()
		s, ok := last[ids[0]]
		for _, id := range ids {
			ok = ok && last[id] == s
		}
		return s, ok && s.leader != ""
	}
	// Every agent reports one leadership's value: its leader's own.
	valueOf := map[string]string{}
	for _, id := range ids {
		valueOf[id] = "http://" + id + ".example:8080"
	}
	var s valueSeen
	transporttest.WaitForWithin(t, time.Minute, "every agent to report one leadership's value", func() bool {
		var ok bool
		s, ok = agreed()
		return ok
	})
	if s.value != valueOf[s.leader] {
		t.Fatalf("every agent reports %q for %s@%d, want its value %q", s.value, s.leader, s.term, valueOf[s.leader])
	}
	// A proclaim at the leader reaches every agent in the same term.
	var leader string
	for try := 1; ; try++ {
		var term uint64
		leader, term = s.leader, s.term
		holds := func() bool { st := els[leader].Status(); return st.Role == core.RoleLeader && st.Term == term }
		proclaimed := "http://" + leader + ".example:9090"
		ended := false
		if err := els[leader].Proclaim(ctx, proclaimed); err != nil {
			if !errors.Is(err, ErrRefused) || holds() {
				t.Fatal(err)
			}
			ended = true // refused: no longer the leader
		} else {
			valueOf[leader] = proclaimed
			transporttest.WaitForWithin(t, time.Minute, "every agent to report "+leader+"'s proclaimed value in term "+fmt.Sprint(term), func() bool {
				if !holds() {
					ended = true
					return true
				}
				got, ok := agreed()
				if !ok || got != (valueSeen{leader, proclaimed, term}) {
					return false
				}
				for _, id := range ids {
					if st := els[id].Status(); st.Value != proclaimed || st.ValueVersion != 2 {
						return false
					}
				}
				return true
			})
		}
		if !ended {
			break
		}
		if try == 3 {
			t.Fatalf("the leadership ended before every agent reported its proclaimed value, in each of %d tries (the last: %s@%d)", try, leader, term)
		}
		t.Logf("%s's leadership of term %d ended before every agent reported its proclaim; again under the next", leader, term)
		transporttest.WaitForWithin(t, time.Minute, "every agent to report the next leadership's value", func() bool {
			var ok bool
			s, ok = agreed()
			return ok && (s.leader != leader || s.term != term)
		})
		if s.value != valueOf[s.leader] {
			t.Fatalf("every agent reports %q for %s@%d, want its value %q", s.value, s.leader, s.term, valueOf[s.leader])
		}
	}
	var follower string
	for _, id := range ids {
		if id != leader {
			follower = id
		}
	}
	if err := els[follower].Proclaim(ctx, "x"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not the leader") {
		t.Errorf("proclaim at a follower: %v", err)
	}
	var ve *core.ValueError
	if err := els[leader].Proclaim(ctx, strings.Repeat("x", core.MaxValueLen+1)); !errors.As(err, &ve) || ve.Bytes != core.MaxValueLen+1 {
		t.Errorf("oversized proclaim: %v", err)
	}
}
