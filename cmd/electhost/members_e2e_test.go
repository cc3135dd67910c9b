package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EMembersGrowShrink: a 3-agent group grows to 5 — two
// agents started with --join, added one at a time through `electhost
// members add` at a follower and at the leader — and shrinks back to 3 —
// the leader removed through its own agent (it hands off first), then a
// follower — while the leader-only command runs. The command never runs
// twice at once, and every agent, the two removed ones included, ends with
// the same committed configuration; the removed ones are non-voters, not
// ready, and say so in their logs; one restarted with its old flags keeps
// the configuration it persisted.
func TestE2EMembersGrowShrink(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: at 100 ms / 600 ms a loaded runner (load 20) went
	// through 24 terms before the first change committed.
	hb, et := 200*time.Millisecond, 1200*time.Millisecond
	c, _ := newNATSCluster(t, hb, et)
	founders := slices.Clone(c.ids)
	for _, id := range founders {
		c.start(id)
	}
	leader, term, took := c.waitAgreement("", 1, time.Minute)
	t.Logf("first election: %s leads term %d after %v", leader, term, took.Round(time.Millisecond))
	c.waitCommandFrom("", term, time.Minute)

	follower := func(leader string) string {
		for _, id := range c.ids {
			if p := c.proc(id); id != leader && p.alive() {
				if s, err := p.status(); err == nil && s.Voter {
					return id
				}
			}
		}
		t.Fatal("no follower")
		return ""
	}

	// Grow: a4 and a5 start outside the configuration.
	for _, id := range []string{"a4", "a5"} {
		c.startWith(id, founders, "--join")
		c.ids = append(c.ids, id)
	}
	waitFor(t, time.Minute, "a4 and a5 up, outside the configuration", func() (bool, string) {
		for _, id := range []string{"a4", "a5"} {
			code, body, err := c.proc(id).get("/readyz")
			if err != nil || code != 503 || !strings.Contains(body, "not in the configuration") {
				return false, id + ": /readyz " + body
			}
		}
		return true, ""
	})
	if code, _, stderr, _ := c.members("add", "a4", leader, "--key", "AAAA"); code != exitUsage || !strings.Contains(stderr, "--key") {
		t.Fatalf("members add --key in a group without auth: exit %d, want 2\n%s", code, stderr)
	}
	if code, _, stderr, _ := c.members("add", "a5", "a4"); code != exitFailure || !strings.Contains(stderr, "not in the configuration") {
		t.Fatalf("members add through an agent outside the configuration: exit %d, want 1\n%s", code, stderr)
	}
	c.change("add", "a4", follower(leader)) // forwarded to the leader
	leader, _, _ = c.waitAgreement("", 1, time.Minute)
	c.change("add", "a5", leader)
	c.sameConfiguration([]string{"a1", "a2", "a3", "a4", "a5"}, nil)
	// Waited for, not read once: a leader change since (the new leader
	// re-stamps the configuration at its term) leaves it uncommitted at a5
	// until a5 hears the commit.
	waitFor(t, time.Minute, "members list --json at a5: 5 members, voter, committed", func() (bool, string) {
		code, out, stderr := runCLI(t, 30*time.Second, nil, "members", "list", "--group", c.group, "--state-dir", c.stateDir("a5"), "--json")
		var list membersReply
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("members list --json at a5: exit %d\n%s\n%s", code, out, stderr)
		}
		return len(list.Members) == 5 && list.Voter && list.Committed, out
	})
	if _, body, err := c.proc("a5").get("/metrics"); err != nil || !strings.Contains(body, `electcore_voter{group="e2e",id="a5"} 1`) ||
		!strings.Contains(body, `electcore_config_members{group="e2e",id="a5"} 5`) {
		t.Fatalf("/metrics of a5: %v\n%s", err, body)
	}

	// Shrink: remove the leader through its own agent, then a follower
	// through a third agent.
	leader, term, _ = c.waitAgreement("", 1, time.Minute)
	removed := []string{leader}
	c.change("remove", leader, leader)
	next, nextTerm, _ := c.waitAgreement(leader, term+1, time.Minute)
	c.waitCommandFrom(leader, nextTerm, time.Minute)
	next, _, _ = c.waitAgreement(leader, nextTerm, time.Minute) // a lease lost since moves it
	other := follower(next)
	removed = append(removed, other)
	var via string // a voter neither leading nor removed
	for _, id := range c.ids {
		if id != next && !slices.Contains(removed, id) {
			via = id
			break
		}
	}
	c.change("remove", other, via)
	var want []string
	for _, id := range c.ids {
		if !slices.Contains(removed, id) {
			want = append(want, id)
		}
	}
	c.sameConfiguration(want, removed)
	for _, id := range removed {
		if b, _ := os.ReadFile(c.proc(id).logPath); !strings.Contains(string(b), "removed from the configuration") {
			t.Errorf("%s's log does not say it was removed", id)
		}
	}
	// A removed agent restarted with flags that list it comes back with
	// the configuration it persisted: still outside, still a non-voter.
	c.signal(removed[0], syscall.SIGTERM)
	if code := c.waitExit(removed[0], time.Minute); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM", removed[0], code)
	}
	c.startWith(removed[0], founders)
	c.sameConfiguration(want, removed)
	final, finalTerm, _ := c.waitAgreement("", 1, time.Minute)
	if slices.Contains(removed, final) {
		t.Fatalf("removed agent %s leads", final)
	}
	c.waitCommandFrom("", finalTerm, time.Minute)

	c.stopAll()
	c.checkCommandLog()
}

// sameConfiguration waits until every agent holds want, committed, with one
// configuration index; removed agents are non-voters and not ready.
func (c *cluster) sameConfiguration(want, removed []string) {
	c.t.Helper()
	waitFor(c.t, time.Minute, "every agent holds "+strings.Join(want, ",")+" committed", func() (bool, string) {
		var index uint64
		var views []string
		ok := true
		for _, id := range c.ids {
			s, err := c.proc(id).status()
			if err != nil {
				return false, id + ": " + err.Error()
			}
			ids := make([]string, len(s.Members))
			for i, m := range s.Members {
				ids[i] = m.ID
			}
			views = append(views, fmt.Sprintf("%s: %s index %d committed %v voter %v", id, strings.Join(ids, ","), s.ConfIndex, s.ConfCommitted, s.Voter))
			if !slices.Equal(ids, want) || !s.ConfCommitted || s.Voter == slices.Contains(removed, id) || (index != 0 && s.ConfIndex != index) {
				ok = false
			}
			index = s.ConfIndex
		}
		return ok, strings.Join(views, "; ")
	})
	for _, id := range removed {
		if code, body, err := c.proc(id).get("/readyz"); err != nil || code != 503 {
			c.t.Errorf("/readyz of removed %s: %d %v %s", id, code, err, body)
		}
	}
}

// configSettled waits until the live agents agree on a leader and every
// live voter holds its configuration, committed.
func (c *cluster) configSettled() {
	c.t.Helper()
	waitFor(c.t, time.Minute, "a leader agreed and its configuration held, committed, by every live voter", func() (bool, string) {
		leader, _, _ := c.waitAgreement("", 1, time.Minute)
		ls, err := c.proc(leader).status()
		if err != nil {
			return false, leader + ": " + err.Error()
		}
		for _, id := range c.ids {
			p := c.proc(id)
			if p == nil || !p.alive() {
				continue
			}
			s, err := p.status()
			if err != nil {
				return false, id + ": " + err.Error()
			}
			if s.Voter && (s.ConfIndex != ls.ConfIndex || !s.ConfCommitted) {
				return false, fmt.Sprintf("%s: index %d committed %v; leader %s: index %d", id, s.ConfIndex, s.ConfCommitted, leader, ls.ConfIndex)
			}
		}
		return true, ""
	})
}

// members runs electhost members op id through via's agent.
func (c *cluster) members(op, id, via string, extra ...string) (int, string, string, time.Duration) {
	c.t.Helper()
	t0 := time.Now()
	args := append([]string{"members", op, id, "--group", c.group, "--state-dir", c.stateDir(via), "--timeout", "1m"}, extra...)
	code, stdout, stderr := runCLI(c.t, 2*time.Minute, nil, args...)
	return code, stdout, stderr, time.Since(t0)
}

// transientRefusals are the refusals of a membership change that pass
// once the group settles, as the core words them: no leader known (a lease
// lost to load), no live member to hand leadership to (a leader removing
// itself before its followers acked its configuration), another change
// waiting (this one, asked before a refusal, still committing: asked
// again, a change already made returns at once).
var transientRefusals = []string{"no leader known", "no live member to hand leadership to", "another change is waiting"}

// change makes a membership change through via and returns what the CLI
// printed; a transient refusal is retried once the agents agree on a
// leader and hold its configuration, committed.
func (c *cluster) change(op, id, via string, extra ...string) string {
	c.t.Helper()
	code, stdout, stderr, took := c.members(op, id, via, extra...)
	transient := func() bool {
		return code == exitFailure && slices.ContainsFunc(transientRefusals, func(r string) bool { return strings.Contains(stderr, r) })
	}
	for try := 1; transient() && try < stepTries; try++ {
		c.t.Logf("members %s %s via %s: %s; again once a leader is agreed and its configuration held", op, id, via, strings.TrimSpace(stderr))
		c.configSettled()
		code, stdout, stderr, took = c.members(op, id, via, extra...)
	}
	if code != 0 {
		c.t.Fatalf("members %s %s via %s: exit %d\nstdout: %s\nstderr: %s", op, id, via, code, stdout, stderr)
	}
	c.t.Logf("members %s %s via %s: %v, process start included (%s)", op, id, via, took.Round(time.Millisecond), strings.TrimSpace(stdout))
	return stdout
}

// waitFor polls cond until it holds, failing the test with its last view
// after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, view := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s (%s)", within, what, view)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2EMembersEd25519: with --auth ed25519, adding a member needs its
// public key (refused in flag words without it); `members add --key` with
// the file `electhost keygen --id` printed distributes it, and the new
// agent, which knew only the founders' keys, becomes a voting member.
func TestE2EMembersEd25519(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: nothing here is a timing promise, and at 100 ms /
	// 600 ms a loaded runner loses leases.
	c, _ := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	dir := t.TempDir()
	var founders strings.Builder
	keygen := func(id string) (keyFile, line string) {
		keyFile = filepath.Join(dir, id+".key")
		code, stdout, stderr := runCLI(t, time.Minute, nil, "keygen", "--out", keyFile, "--id", id)
		if code != 0 {
			t.Fatalf("keygen %s: exit %d\n%s", id, code, stderr)
		}
		return keyFile, stdout
	}
	keys := map[string]string{}
	for _, id := range c.ids {
		var line string
		keys[id], line = keygen(id)
		founders.WriteString(line)
	}
	membersFile := filepath.Join(dir, "members")
	os.WriteFile(membersFile, []byte(founders.String()), 0o644)
	for _, id := range c.ids {
		c.startAuthAgent(id, keys[id], membersFile)
	}
	leader, _, _ := c.waitAgreement("", 1, 2*time.Minute) // the first start may compile the module

	newKey, newLine := keygen("a4")
	pubFile := filepath.Join(dir, "a4.pub")
	os.WriteFile(pubFile, []byte(newLine), 0o644)
	c.startAuthAgent("a4", newKey, membersFile, "--join")
	c.ids = append(c.ids, "a4")
	code, _, stderr, _ := c.members("add", "a4", leader)
	if code != exitUsage || !strings.Contains(stderr, "give a4's public key with --key") {
		t.Fatalf("members add without --key in an ed25519 group: exit %d, want 2\n%s", code, stderr)
	}
	c.change("add", "a4", leader, "--key", pubFile)
	c.sameConfiguration([]string{"a1", "a2", "a3", "a4"}, nil)
	c.stopAll()
}
