package main

import (
	"fmt"
	"time"
)

// A loaded runner costs leases: an agent starved of CPU acks late, or a
// follower that heard nothing for an election timeout campaigns, and the
// leadership moves to a new term. A test of something other than that
// (a value, a transfer, a drain) must not fail on it, nor assume one
// leadership throughout. It runs each step under the leadership it began
// with and, when that leadership ended during the step, runs the step
// again under the next one; a step that fails while its leadership still
// holds fails the test, and so does one that fails every try (a step that
// itself moves the leadership). Safety checks (no two leader-only commands
// at once, no value reported for a leader that never had it) hold across
// every leadership and fail the test at once.

// stepTries is how many times a step runs before the test gives up on
// it: three leaderships lost in a row during one step is not load.
const stepTries = 3

// stoppedLeading is the reason id logged for no longer leading term, ""
// if it has not logged one (a leader whose lease never began logs none).
func (c *cluster) stoppedLeading(id string, term uint64) string {
	for _, rec := range c.proc(id).logLines("stopped leading") {
		if tm, _ := rec["term"].(float64); uint64(tm) == term {
			r, _ := rec["reason"].(string)
			return r
		}
	}
	return ""
}

// awaitStopped is stoppedLeading once id has logged why it stopped leading
// term: a leader that lost its lease may log it only when it runs again (a
// loaded runner), after the others moved on. It gives up after a minute,
// or at once if id exited, with "": a give-up, for the tests that require
// the reason; a leader whose lease never began logs none, so where the
// reason is only reported, read it with stoppedLeading.
func (c *cluster) awaitStopped(id string, term uint64) string {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		why := c.stoppedLeading(id, term)
		if why != "" || time.Now().After(deadline) || !c.proc(id).alive() {
			return why
		}
	}
}

// leads says whether id's own /status says it leads term.
func (c *cluster) leads(id string, term uint64) bool {
	s, err := c.proc(id).status()
	return err == nil && s.Role == "leader" && s.Term == term
}

// underLeader waits until every live agent agrees that id leads (any
// member if id is ""), runs step with that leader and term and returns
// them. step returns "" when it succeeded, else what went wrong. If that
// leadership ended meanwhile, the step runs again under the next one (id's,
// if given; at most stepTries times in all); otherwise its failure fails
// the test.
func (c *cluster) underLeader(id, what string, step func(leader string, term uint64) string) (string, uint64) {
	c.t.Helper()
	for try := 1; ; try++ {
		leader, term := id, uint64(0)
		if id == "" {
			leader, term, _ = c.waitAgreement("", 1, time.Minute)
		} else {
			term = c.waitLeads(id, time.Minute)
		}
		problem := step(leader, term)
		if problem == "" {
			return leader, term
		}
		// Led throughout: its status says it leads term, and it never
		// logged stopping in term (a lease that ended and was regained in
		// the same term stops and restarts the leader-only command, which
		// a status read afterwards does not show).
		if c.leads(leader, term) && c.stoppedLeading(leader, term) == "" {
			c.t.Fatalf("%s, while %s led term %d throughout: %s", what, leader, term, problem)
		}
		if try == stepTries {
			why := c.awaitStopped(leader, term)
			c.t.Fatalf("%s: the leadership ended during each of %d tries (the last, %s's term %d: %q): %s", what, try, leader, term, why, problem)
		}
		c.t.Logf("%s: %s's leadership of term %d ended during the step (%q), again: %s", what, leader, term, c.stoppedLeading(leader, term), problem)
	}
}

// cameBy says how id came to lead term: from the last leadership before
// it that a member logged ending since since, its leader, term and reason
// ("resigned" for a hand-off; "" and from "" when none ended).
func (c *cluster) cameBy(id string, term uint64, since time.Time) (from string, fromTerm uint64, why string) {
	for _, other := range c.ids {
		p := c.proc(other)
		if other == id || p == nil {
			continue
		}
		for _, rec := range p.logLines("stopped leading") {
			tm, _ := rec["term"].(float64)
			ts, _ := rec["time"].(string)
			at, _ := time.Parse(time.RFC3339Nano, ts)
			if uint64(tm) < term && uint64(tm) >= fromTerm && at.After(since) {
				from, fromTerm = other, uint64(tm)
				why, _ = rec["reason"].(string)
			}
		}
	}
	return from, fromTerm, why
}

// lostSince describes the first leadership a member logged ending since
// since other than by its own hand-off ("resigned"): a lease lost to load
// or a starved member's campaign; "" if none.
func (c *cluster) lostSince(since time.Time) string {
	for _, id := range c.ids {
		p := c.proc(id)
		if p == nil {
			continue
		}
		for _, rec := range p.logLines("stopped leading") {
			ts, _ := rec["time"].(string)
			at, _ := time.Parse(time.RFC3339Nano, ts)
			if why, _ := rec["reason"].(string); at.After(since) && why != "resigned" {
				return fmt.Sprintf("%s stopped leading term %v: %s", id, rec["term"], why)
			}
		}
	}
	return ""
}

// watchStatus reads every live agent's /status every 50 ms for d and
// hands each answer to see; it stops at the first problem see reports
// and returns it ("" when d passed without one). A one-sided watch: a
// slow machine can only make it see less.
func (c *cluster) watchStatus(d time.Duration, see func(id string, s statusJSON) string) string {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, id := range c.ids {
			p := c.proc(id)
			if p == nil || !p.alive() {
				continue
			}
			if s, err := p.status(); err == nil {
				if problem := see(id, s); problem != "" {
					return problem
				}
			}
		}
	}
	return ""
}
