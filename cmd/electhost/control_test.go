package main

import (
	"strings"
	"testing"

	"github.com/electcore/electcore/core"
)

// TestReadiness: /readyz is honest about a leader it only remembers
// (issue 12, item 4): a follower whose leader fell silent beyond the
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

// TestConfigInFlags: every core.Config field message electhost can provoke
// is rewritten in flag names.
func TestConfigInFlags(t *testing.T) {
	for in, want := range map[string]string{
		"heartbeat_ms 5: want 10..600000":                                                        "--heartbeat 5ms: want 10ms..10m",
		"election_timeout_ms 20: want 3×heartbeat (300)..3600000":                                "--election-timeout 20ms: want 3×--heartbeat (300ms)..1h0m0s",
		"lease_ms 50: want 2×heartbeat (200)..1959 (election timeout shrunk by the drift bound)": "--lease 50ms: want 2×--heartbeat (200ms)..1.959s",
		"handoff_hold_ms 700: want 0..election timeout (600)":                                    "--grace + 50ms = 700ms exceeds --election-timeout 600ms",
		`member_keys: no public key for member "c"`:                                              `--members-file has no public key for member "c"`,
		`members: "a" listed twice`:                                                              `--members: "a" listed twice`,
		`id "a b": byte 1 (' ') not in [A-Za-z0-9._:@/+-]`:                                       `--id "a b": byte 1`,
	} {
		if got := configInFlags(in); !strings.HasPrefix(got, want) {
			t.Errorf("configInFlags(%q) = %q, want prefix %q", in, got, want)
		}
	}
}
