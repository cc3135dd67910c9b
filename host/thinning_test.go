package host

import (
	"testing"

	"github.com/electcore/electcore/core"
)

// Thinning takes nothing from a settled swarm's leaders (inbox.go,
// passAck): three agents in 20 groups (more than thinGroups), default
// timings, stepped every 20 ms over a bus without delay. Over ten seconds
// of thinning every leader keeps its term, its lease runs from its latest
// heartbeat as it would with every ack (acked within the same step here),
// and it hears every member within two heartbeat intervals; and the
// priority hand-offs of the settling went through.
func TestThinnedAcksKeepLeases(t *testing.T) {
	s := newSteadySwarm(t, 20, nil)
	s.settle(t)
	const tickMs, hbMs = 20, core.DefaultHeartbeatMs
	leaseMs := core.MaxLeaseMs(core.DefaultElectionTimeoutMs, core.DefaultMaxDriftPPM)
	terms := map[string]uint64{}
	var thinned0 uint64
	for _, ag := range s.agents {
		thinned0 += ag.Stats().Thinned
	}
	ids := []string{"a", "b", "c"} // newSteadySwarm's
	for range 500 {
		s.tick(tickMs)
		now := s.clock.NowMs()
		for i, id := range ids {
			for _, el := range s.els[i] {
				st := el.Status()
				if st.Leader != id {
					continue
				}
				if was, ok := terms[st.Group]; ok && was != st.Term {
					t.Fatalf("at %d ms %s: term %d, was %d", now, st.Group, st.Term, was)
				}
				terms[st.Group] = st.Term
				if st.LeaseUntil < now-hbMs-tickMs+leaseMs {
					t.Fatalf("at %d ms %s: lease until %d, not from the last heartbeat (lease %d ms)", now, st.Group, st.LeaseUntil, leaseMs)
				}
				for _, m := range st.Members {
					if m.ID != id && now-m.LastHeard > 2*hbMs+tickMs {
						t.Fatalf("at %d ms %s: %s last heard at %d", now, st.Group, m.ID, m.LastHeard)
					}
				}
			}
		}
	}
	var thinned uint64
	for _, ag := range s.agents {
		thinned += ag.Stats().Thinned
	}
	t.Logf("%d acks thinned, %d groups led", thinned-thinned0, len(terms))
	if len(terms) != 20 {
		t.Fatalf("%d groups led", len(terms))
	}
	// The priority hand-offs, which ask a target's acks to be recent, went
	// through while thinning: each group is led by its best member.
	for _, el := range s.els[0] {
		st := el.Status()
		best := st.Members[0]
		for _, m := range st.Members {
			if m.Priority > best.Priority {
				best = m
			}
		}
		if st.Leader != best.ID {
			t.Errorf("%s led by %s, not by its best member %s", st.Group, st.Leader, best.ID)
		}
	}
	// Per heartbeat and group: the other follower's ack at both followers
	// (one in four passes) and the slower follower's at the leader (one in
	// two): 2×3/4 + 1/2 = 2 of 6 acks thinned, 20 heartbeats each.
	if got := thinned - thinned0; got < 20*20*3/2 {
		t.Fatalf("%d acks thinned in 10 s of 20 groups", got)
	}
}
