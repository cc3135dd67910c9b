package main

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// dupGuard decides what a report that another process speaks with this
// agent's id does (RATIONALE: "Duplicate ids").
//
// One message is no evidence: with authentication off anyone on the bus can
// write one, and with it on a replay of this agent's own earlier run was one
// (the core now refuses those). So a report never stops an agent that was
// running first: it is logged, counted (/status, /metrics) and makes /readyz
// answer 503 for two election timeouts. Only an agent still starting refuses
// to go on (exit 5), and only on sustained evidence: reports spanning at least
// an election timeout (the core reports at most one per election timeout, so
// that is two or more) within its first startWindow election timeouts. A
// second process started by mistake with a running agent's id is thus the
// one that stops, and the agent that was there first keeps running.
type dupGuard struct {
	et time.Duration // election timeout

	mu      sync.Mutex
	joined  time.Time // when this agent joined (zero: not yet)
	first   time.Time // the first report within the start window (zero: none)
	last    time.Time // the last report (zero: none)
	reports uint64
}

// startWindow is how long an agent counts as newly started, in election
// timeouts: long enough for a running duplicate to be heard twice an
// election timeout apart.
const startWindow = 4

func newDupGuard(et time.Duration) *dupGuard { return &dupGuard{et: et} }

// start records when this agent joined.
func (d *dupGuard) start(now time.Time) {
	d.mu.Lock()
	d.joined = now
	d.mu.Unlock()
}

// report records a report at now and tells whether this agent is still
// starting and, if so, whether it should refuse to go on.
func (d *dupGuard) report(now time.Time) (starting, refuse bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reports++
	d.last = now
	if !d.joined.IsZero() && now.Sub(d.joined) > startWindow*d.et {
		return false, false // running: it was here first
	}
	if d.first.IsZero() {
		d.first = now
		return true, false
	}
	return true, now.Sub(d.first) >= d.et
}

// unready is /readyz's reason while a report is recent (within two election
// timeouts), or "".
func (d *dupGuard) unready(now time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last.IsZero() || now.Sub(d.last) > 2*d.et {
		return ""
	}
	return fmt.Sprintf("another process spoke with this agent's id %v ago (%d reports): two agents with one id vote twice; this agent keeps running",
		now.Sub(d.last).Round(time.Millisecond), d.reports)
}

// self handles a report of another process speaking with this agent's id:
// an agent still starting that hears it for an election timeout refuses
// to go on (reason on selfDup: exit 5); one that was running first keeps
// running and says so (RATIONALE: "Duplicate ids").
func (g *dupGuard) self(reason string, selfDup chan<- string, logger *slog.Logger) {
	switch starting, refuse := g.report(time.Now()); {
	case refuse:
		select {
		case selfDup <- reason:
		default:
		}
	case starting:
		logger.Warn("another process speaks with this agent's id while it starts; if that goes on for an election timeout, this agent stops (exit 5)", "reason", reason)
	default:
		logger.Warn("another process speaks with this agent's id; this agent was running first and keeps running: stop the other one (give every agent its own --id)", "reason", reason)
	}
}
