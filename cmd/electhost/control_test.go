package main

import (
	"strings"
	"testing"

	"github.com/electcore/electcore/core"
)

// TestReadiness: /readyz is honest about a leader it only remembers: a
// follower whose leader fell silent beyond the
// election timeout (a broker outage), or a leader whose lease ran out, is
// not ready.
func TestReadiness(t *testing.T) {
	const et = 600
	follower := func(lastHeard int64) core.Status {
		return core.Status{ID: "a", Mode: core.ModeQuorum, Voter: true, Role: core.RolePreCandidate, Leader: "b", Term: 3,
			Members: []core.MemberStatus{{ID: "a"}, {ID: "b", LastHeard: lastHeard}}}
	}
	leader := func(leaseUntil int64) core.Status {
		return core.Status{ID: "a", Mode: core.ModeQuorum, Voter: true, Role: core.RoleLeader, Leader: "a", Term: 3, LeaseUntil: leaseUntil}
	}
	for _, c := range []struct {
		name  string
		st    core.Status
		ready bool
		why   string
	}{
		{"leader heard", follower(10_000 - 100), true, "heard 100ms ago"},
		{"leader silent past the election timeout", follower(10_000 - et - 1), false, "over the election timeout"},
		{"leader never heard", follower(0), false, "never heard"},
		{"no leader", core.Status{ID: "a", Mode: core.ModeQuorum, Voter: true}, false, "no leader known"},
		{"outside the configuration, leader heard", func() core.Status { s := follower(10_000 - 100); s.Voter = false; return s }(), false, "not in the configuration"},
		{"leading with a lease", leader(10_001), true, "leads term 3"},
		{"leading, lease over", leader(10_000), false, "without a current lease"},
		{"term space spent", func() core.Status { s := follower(10_000 - 100); s.Term = core.MaxTerm; return s }(), false, "reset-state"},
		{"bully leader needs no lease", core.Status{ID: "a", Mode: core.ModeBully, Role: core.RoleLeader, Leader: "a", Term: 3}, true, "leads"},
	} {
		ready, why := readiness(c.st, 10_000, et)
		if ready != c.ready || !strings.Contains(why, c.why) {
			t.Errorf("%s: ready %v %q, want %v %q", c.name, ready, why, c.ready, c.why)
		}
	}
}
