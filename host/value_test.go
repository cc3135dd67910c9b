package host

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport/mem"
)

type valueSeen struct {
	at, leader, value string
	term              uint64
}

// Every agent learns the leader's value through OnValue and Status, a
// proclaim reaches the followers without a new term, and a proclaim that
// the core refuses (not the leader, a bad value) fails.
func TestValueAndProclaim(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{Seed: 5, DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond})
	r := testRuntime(t)
	ids := []string{"a", "b", "c"}
	seen := make(chan valueSeen, 64)
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
			seen <- valueSeen{id, leader, value, term}
		}})
		if err != nil {
			t.Fatal(err)
		}
		els[id] = el
	}
	// waitAll waits until every agent's latest report of value names one
	// leadership; it returns it.
	var early []valueSeen // seen before waitAll was asked
	waitAll := func(value string) (string, uint64) {
		t.Helper()
		got := map[string]valueSeen{}
		for _, s := range early {
			if s.value == value {
				got[s.at] = s
			}
		}
		early = nil
		agreed := func() (string, uint64, bool) {
			var leader string
			var term uint64
			for _, s := range got {
				if leader != "" && (s.leader != leader || s.term != term) {
					return "", 0, false
				}
				leader, term = s.leader, s.term
			}
			return leader, term, len(got) == len(ids)
		}
		timeout := time.After(30 * time.Second)
		for {
			if leader, term, ok := agreed(); ok {
				return leader, term
			}
			select {
			case s := <-seen:
				if s.value == value {
					got[s.at] = s
				}
			case <-timeout:
				t.Fatalf("value %q not reported by every agent for one leadership: %v", value, got)
			}
		}
	}
	var leader string
	var term uint64
	for leader == "" {
		select {
		case s := <-seen:
			early = append(early, s)
			if s.at == s.leader {
				leader, term = s.leader, s.term
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no leader announced its value")
		}
	}
	want := "http://" + leader + ".example:8080"
	if l, tm := waitAll(want); l != leader || tm != term {
		t.Fatalf("value of %s@%d, want %s@%d", l, tm, leader, term)
	}
	if err := els[leader].Proclaim(ctx, "http://"+leader+".example:9090"); err != nil {
		t.Fatal(err)
	}
	if l, tm := waitAll("http://" + leader + ".example:9090"); l != leader || tm != term {
		t.Fatalf("proclaimed value of %s@%d, want %s@%d (no new term)", l, tm, leader, term)
	}
	for _, id := range ids {
		if st := els[id].Status(); st.Value != "http://"+leader+".example:9090" || st.ValueVersion != 2 {
			t.Errorf("%s: status value %q ver %d", id, st.Value, st.ValueVersion)
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
