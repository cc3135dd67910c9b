package main

import (
	"strings"
	"testing"
	"time"
)

// TestDupGuard: one report never stops an agent; a running agent is never
// stopped however many come; an agent still starting refuses to go on only
// when reports span an election timeout; /readyz is unready for two election
// timeouts after each report.
func TestDupGuard(t *testing.T) {
	et := time.Second
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ms                int
		starting, refuses bool
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"one report while starting", []step{{100, true, false}}},
		{"two within an election timeout", []step{{100, true, false}, {900, true, false}}},
		{"sustained while starting", []step{{100, true, false}, {900, true, false}, {1100, true, true}}},
		{"sustained, running", []step{{4100, false, false}, {5200, false, false}, {9000, false, false}}},
		{"first while starting, then running", []step{{3500, true, false}, {4100, false, false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDupGuard(et)
			d.start(t0)
			if why := d.unready(t0); why != "" {
				t.Fatalf("unready before any report: %q", why)
			}
			for _, s := range c.steps {
				starting, refuse := d.report(at(s.ms))
				if starting != s.starting || refuse != s.refuses {
					t.Fatalf("report at %d ms: starting %v refuse %v, want %v %v", s.ms, starting, refuse, s.starting, s.refuses)
				}
			}
			last := c.steps[len(c.steps)-1].ms
			if why := d.unready(at(last + 2000)); !strings.Contains(why, "another process spoke with this agent's id") {
				t.Fatalf("readiness two election timeouts after a report: %q", why)
			}
			if why := d.unready(at(last + 2001)); why != "" {
				t.Fatalf("readiness after two election timeouts: %q", why)
			}
		})
	}
}
