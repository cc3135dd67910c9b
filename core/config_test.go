package core

import (
	"strings"
	"testing"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{ID: "a", Group: "g", Members: []string{"c", "a", "b"}}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeQuorum || c.HeartbeatMs != 500 || c.ElectionTimeoutMs != 2000 ||
		c.MaxDriftPPM != 10_000 || c.CollectMs != 500 || c.Seed == 0 {
		t.Fatalf("defaults: %+v", c)
	}
	// 2000 × 0.99 / 1.01 − 1: no acknowledging follower can vote for anyone
	// else before the lease has run out, even with 1% drift either way.
	if c.LeaseMs != 1959 {
		t.Fatalf("lease %d, want 1959", c.LeaseMs)
	}
	if strings.Join(c.Members, ",") != "a,b,c" {
		t.Fatalf("members not sorted: %v", c.Members)
	}
}

func TestConfigRejects(t *testing.T) {
	ok := Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no id", func(c *Config) { c.ID = "" }, "id: empty"},
		{"id with a quote", func(c *Config) { c.ID = `a"`; c.Members = []string{`a"`} }, "not in"},
		{"long group", func(c *Config) { c.Group = strings.Repeat("g", 129) }, "at most 128"},
		{"bad mode", func(c *Config) { c.Mode = "raft" }, "mode"},
		{"quorum without members", func(c *Config) { c.Members = nil }, "full member list"},
		{"self not a member", func(c *Config) { c.Members = []string{"b", "c"} }, "must include"},
		{"duplicate member", func(c *Config) { c.Members = []string{"a", "b", "b"} }, "twice"},
		{"heartbeat too small", func(c *Config) { c.HeartbeatMs = 5 }, "heartbeat_ms"},
		{"timeout under 3 heartbeats", func(c *Config) { c.HeartbeatMs = 500; c.ElectionTimeoutMs = 1000 }, "election_timeout_ms"},
		{"lease beyond the drift bound", func(c *Config) { c.LeaseMs = 1960 }, "lease_ms"},
		// Renewed by the next heartbeat's acks, a heartbeat plus a round trip
		// later: a shorter lease lapses between heartbeats, forever.
		{"lease under two heartbeats", func(c *Config) { c.LeaseMs = 999 }, "lease_ms 999: want 2×heartbeat (1000)"},
		{"negative drift", func(c *Config) { c.MaxDriftPPM = -1 }, "max_drift_ppm"},
		{"collect beyond timeout", func(c *Config) { c.CollectMs = 5000 }, "collect_ms"},
	} {
		c := ok
		c.Members = append([]string(nil), ok.Members...)
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
}

// TestJoinRejectsBadConfig: a bad config is refused with a reason and no
// group is joined.
func TestJoinRejectsBadConfig(t *testing.T) {
	e := NewEngine()
	var out Output
	err := e.Join(GroupSpec{Config: Config{ID: "a", Group: "g"}}, 0, &out)
	if err == nil || len(e.Groups()) != 0 {
		t.Fatalf("err %v, groups %v", err, e.Groups())
	}
}

// The hand-off hold comes out of the lease: the resigning leader's work must
// end within the safe lease of its last acknowledged heartbeat.
func TestHandoffHoldShrinksTheLease(t *testing.T) {
	c := Config{ID: "a", Group: "g", Members: []string{"a"}, HandoffHoldMs: 550}
	n, err := c.WithTimingDefaults()
	if err != nil || n.LeaseMs != MaxLeaseMs(DefaultElectionTimeoutMs, DefaultMaxDriftPPM)-550 {
		t.Fatalf("default lease with a hold: %d, %v", n.LeaseMs, err)
	}
	c.LeaseMs = 1500 // 1500 + 550 > 1959
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "lease_ms 1500") {
		t.Fatalf("lease + hold beyond the safe lease: %v", err)
	}
	c.LeaseMs, c.HandoffHoldMs = 0, 1000 // leaves 959 < 2 heartbeats
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "handoff_hold_ms 1000") {
		t.Fatalf("a hold that leaves no lease: %v", err)
	}
}
