package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2ETransferDrainStay: leadership goes where the operator puts it, and
// stays, with real processes over an embedded NATS server. a1 is the best
// member (priority 30, then a2 20, a3 10):
//
//   - electhost transfer --to a3 moves leadership, and it stays with a3
//     (the priority hand-off would give it back to a1 after the calm of ten
//     election timeouts a resign earns: the group is watched for twelve);
//   - electhost resign of a1 moves it to a2 for the calm: a1 gets it back
//     by priority no sooner than ten election timeouts later;
//   - electhost drain of the leading a1 hands over at once; drained, a1
//     shows it in /status, /readyz and /metrics, keeps it across a restart,
//     does not get leadership back while watched (past the calm), and when the leader is
//     killed does not campaign: a3 is elected. undrain gives it back.
func TestE2ETransferDrainStay(t *testing.T) {
	t.Parallel()
	hb, et := 100*time.Millisecond, 600*time.Millisecond
	c, _ := newNATSCluster(t, hb, et)
	prio := map[string]string{"a1": "30", "a2": "20", "a3": "10"}
	start := func(id string) { c.startWith(id, c.ids, "--priority", prio[id]) }
	for _, id := range c.ids {
		start(id)
	}
	// steady watches the group for d and fails at the first sign that
	// leadership left leader or term (a one-sided check: a slow machine
	// can only make the watch see less, never fail it wrongly).
	steady := func(leader string, term uint64, d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			for _, id := range c.ids {
				p := c.proc(id)
				if p == nil || !p.alive() {
					continue
				}
				s, err := p.status()
				if err != nil {
					continue
				}
				if s.Term != term || s.Leader != "" && s.Leader != leader {
					t.Fatalf("leadership moved off %s (term %d): %s sees %q leading term %d", leader, term, id, s.Leader, s.Term)
				}
			}
		}
	}
	verb := func(args ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(t, time.Minute, nil, append(args, "--json")...)
		var rep map[string]any
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil {
			t.Fatalf("electhost %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, stdout, stderr)
		}
		return rep
	}

	term := c.waitLeads("a1", time.Minute) // the first start may compile the module

	// A follower cannot transfer: the error names the leader and where to
	// run it.
	code, _, stderr := runCLI(t, 30*time.Second, nil, "transfer", "--group", c.group, "--to", "a3", "--state-dir", c.stateDir("a2"))
	if code != exitFailure {
		t.Fatalf("transfer at a follower: exit %d, want 1\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, "a2 is not the leader of "+c.group+": a1 is")

	// Transfer stays.
	rep := verb("transfer", "--group", c.group, "--to", "a3", "--state-dir", c.stateDir("a1"))
	if rep["leader"] != "a3" {
		t.Fatalf("transfer --to a3: %v", rep)
	}
	t.Logf("transfer a1 -> a3: successor heard by a1 after %v ms", rep["took_ms"])
	term = c.waitLeads("a3", 10*time.Second)
	steady("a3", term, 12*et)

	// Back to a1 (pinned there), then a resign of the best member: a2
	// leads for the calm.
	verb("transfer", "--group", c.group, "--to", "a1", "--state-dir", c.stateDir("a3"))
	c.waitLeads("a1", 10*time.Second)
	t0 := time.Now()
	rep = verb("resign", "--group", c.group, "--state-dir", c.stateDir("a1"))
	if rep["leader"] != "a2" {
		t.Fatalf("resign of a1: %v, want a2 to succeed it", rep)
	}
	c.waitLeads("a1", 30*time.Second)
	back := time.Since(t0)
	t.Logf("resign of a1: leadership back at a1 after %v (calm: 10 election timeouts = %v from when a2 hears a1 again)", back.Round(time.Millisecond), 10*et)
	if back < 8*et {
		t.Fatalf("resign of the best member bounced back after %v, within the calm (at least %v)", back, 8*et)
	}

	// Drain the leader: it hands over at once.
	rep = verb("drain", "--group", c.group, "--state-dir", c.stateDir("a1"))
	if rep["was_leader"] != true || rep["leader"] != "a2" || rep["drained"] != true {
		t.Fatalf("drain of the leading a1: %v", rep)
	}
	t.Logf("drain of the leading a1: a2 heard leading after %v ms", rep["took_ms"])
	term = c.waitLeads("a2", 10*time.Second)
	drainedEverywhere := func() {
		t.Helper()
		p := c.proc("a1")
		waitFor(t, 10*time.Second, "a1 shows the drain", func() (bool, string) {
			s, err := p.status()
			if err != nil || !s.Drained || !strings.Contains(s.ReadyReason, "drained") {
				return false, "status: " + s.ReadyReason
			}
			if code, body, err := p.get("/readyz"); err != nil || code != 200 || !strings.Contains(body, "drained") {
				return false, "/readyz: " + body
			}
			if code, body, err := p.get("/metrics"); err != nil || code != 200 || !strings.Contains(body, `electcore_drained{group="e2e",id="a1"} 1`) {
				return false, "/metrics lacks electcore_drained 1"
			}
			return true, ""
		})
	}
	drainedEverywhere()

	// Drained survives a restart.
	c.signal("a1", syscall.SIGTERM)
	c.waitExit("a1", 10*time.Second)
	start("a1")
	drainedEverywhere()
	steady("a2", term, 12*et) // past the calm of a1's hand-off

	// The leader killed: a1, the best member, does not campaign; a3 leads.
	c.signal("a2", syscall.SIGKILL)
	c.waitExit("a2", 10*time.Second)
	leader, _, took := c.waitAgreement("a2", term+1, 20*time.Second)
	if leader != "a3" {
		t.Fatalf("after the leader was killed, %s leads: want a3 (a1 is drained)", leader)
	}
	t.Logf("leader killed with the best member drained: a3 leads after %v", took.Round(time.Millisecond))

	// Undrained, a1 gets leadership back by priority.
	start("a2")
	rep = verb("undrain", "--group", c.group, "--state-dir", c.stateDir("a1"))
	if rep["drained"] != false {
		t.Fatalf("undrain: %v", rep)
	}
	c.waitLeads("a1", 20*time.Second)
	if s, err := c.proc("a1").status(); err != nil || s.Drained {
		t.Fatalf("a1 after undrain: drained=%v %v", s.Drained, err)
	}
	c.checkCommandLog()
}

// agreed reports the leader and term every live agent agrees on, with that
// leader reporting itself leading (ok false if they do not agree), and a
// view of what each agent said.
func (c *cluster) agreed() (leader string, term uint64, ok bool, view string) {
	var views []string
	ok = true
	roles := map[string]string{}
	for _, id := range c.ids {
		p := c.proc(id)
		if p == nil || !p.alive() {
			continue
		}
		s, err := p.status()
		if err != nil {
			return "", 0, false, id + ": " + err.Error()
		}
		roles[id] = s.Role
		views = append(views, id+":"+s.Role+" leader="+s.Leader)
		switch {
		case s.Leader == "":
			ok = false
		case leader == "":
			leader, term = s.Leader, s.Term
		case s.Leader != leader || s.Term != term:
			ok = false
		}
	}
	return leader, term, ok && roles[leader] == "leader", strings.Join(views, "; ")
}

// waitLeads waits until every live agent agrees that id leads, and returns
// the term.
func (c *cluster) waitLeads(id string, within time.Duration) uint64 {
	c.t.Helper()
	var term uint64
	waitFor(c.t, within, id+" leads, agreed", func() (bool, string) {
		l, tm, ok, view := c.agreed()
		term = tm
		return ok && l == id, view
	})
	return term
}

// TestE2EHealthCheckHandsOver: health-gated leadership with real processes
// over an embedded NATS server. Every agent runs --check 'test ! -e
// sick-ID' every 100 ms, unhealthy after 2 failures; a1 is the best
// member. a1's check starts failing: it hands leadership to a2 within
// about 2 × 100 ms plus a hand-off, and /status, /readyz and
// electcore_unhealthy say why. Its check passes again: leadership comes
// back to a1 by priority, but only after the calm (no churn).
func TestE2EHealthCheckHandsOver(t *testing.T) {
	t.Parallel()
	hb, et := 100*time.Millisecond, 600*time.Millisecond
	c, _ := newNATSCluster(t, hb, et)
	prio := map[string]string{"a1": "30", "a2": "20", "a3": "10"}
	sick := func(id string) string { return filepath.Join(c.root, "sick-"+id) }
	for _, id := range c.ids {
		c.startWith(id, c.ids, "--priority", prio[id], "--check", "test ! -e "+sick(id),
			"--check-interval", "100ms", "--check-failures", "2", "--check-timeout", "1s")
	}
	c.waitLeads("a1", time.Minute) // the first start may compile the module

	if err := os.WriteFile(sick("a1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.waitLeads("a2", 20*time.Second)
	moved := time.Since(t0)
	t.Logf("a1's check failing: a2 leads after %v (2 failures at 100 ms, then the hand-off)", moved.Round(time.Millisecond))
	p := c.proc("a1")
	waitFor(t, 10*time.Second, "a1 says it is unhealthy", func() (bool, string) {
		s, err := p.status()
		if err != nil || s.Health == nil || s.Health.Healthy || !strings.Contains(s.Health.Reason, "exited 1") || !strings.Contains(s.ReadyReason, "unhealthy") {
			return false, "status: " + s.ReadyReason
		}
		if code, body, err := p.get("/readyz"); err != nil || code != 200 || !strings.Contains(body, "unhealthy") {
			return false, "/readyz: " + body
		}
		if code, body, err := p.get("/metrics"); err != nil || code != 200 || !strings.Contains(body, `electcore_unhealthy{group="e2e",id="a1"} 1`) {
			return false, "/metrics lacks electcore_unhealthy 1"
		}
		return true, ""
	})

	if err := os.Remove(sick("a1")); err != nil {
		t.Fatal(err)
	}
	c.waitLeads("a1", 30*time.Second)
	back := time.Since(t0)
	t.Logf("a1's check passing again: leadership back at a1 %v after it failed (calm: 10 election timeouts from its hand-off)", back.Round(time.Millisecond))
	if back < 8*et {
		t.Fatalf("leadership came back to a1 after %v, within the calm (at least %v): churn", back, 8*et)
	}
	c.checkCommandLog()
}
