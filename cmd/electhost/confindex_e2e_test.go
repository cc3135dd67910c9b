package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
)

// TestE2EForgedConfigIndex: with authentication off, one forged config in
// the leader's name at the largest configuration index stalled a group for
// good: the configuration never committed again, `members add` answered
// "another change is waiting" (or timed out) forever and hand-offs could
// name no successor. Now an index beyond 2^53−1 is malformed, and a leader
// whose followers ack a newer version of its own term than its own steps
// down, so the next leader's re-stamp supersedes the forgery: a change
// commits, is undone, and a hand-off makes its successor leader.
func TestE2EForgedConfigIndex(t *testing.T) {
	t.Parallel()
	c, url := newNATSCluster(t, 100*time.Millisecond, 600*time.Millisecond)
	c.group = "e2e-conf-index"
	f := newForger(t, url, c.group)
	c.startAll()
	leader, term, _ := c.waitAgreement("", 1, 60*time.Second)
	statusOf := func(id string) statusJSON {
		t.Helper()
		s, err := c.proc(id).status()
		if err != nil {
			t.Fatalf("%s /status: %v", id, err)
		}
		return s
	}
	var conf uint64
	waitFor(t, 10*time.Second, "every agent holds the leader's configuration, committed", func() (bool, string) {
		var views []string
		ok := true
		for _, id := range c.ids {
			s := statusOf(id)
			views = append(views, fmt.Sprintf("%s: %d.%d committed %v", id, s.ConfTerm, s.ConfIndex, s.ConfCommitted))
			ok = ok && s.ConfTerm == term && s.ConfCommitted
			conf = s.ConfTerm
		}
		return ok, strings.Join(views, "; ")
	})

	// The config: a term and an index no count may reach. Refused by
	// every agent (an implausible term, or a malformed index).
	rejected := map[string]uint64{}
	for _, id := range c.ids {
		rejected[id] = statusOf(id).Rejected
	}
	f.publish(f.forge(map[string]any{"type": "config", "from": leader, "conf_term": uint64(core.MaxTerm),
		"conf_index": uint64(1<<64 - 1), "members": c.ids}))
	for _, id := range c.ids {
		if id == leader {
			continue // a leader ignores configs: nothing to count
		}
		waitFor(t, 10*time.Second, id+" refuses the config at 2^53−1, 2^64−1", func() (bool, string) {
			s := statusOf(id)
			return s.Rejected > rejected[id], fmt.Sprintf("rejected %d, term %d, conf %d.%d", s.Rejected, s.Term, s.ConfTerm, s.ConfIndex)
		})
	}

	// The largest index the decoder accepts, in the leader's own term and
	// name: the followers take it.
	t0 := time.Now()
	f.publish(f.forge(map[string]any{"type": "config", "from": leader, "conf_term": conf,
		"conf_index": uint64(core.MaxTerm), "members": c.ids}))
	for _, id := range c.ids {
		if id == leader {
			continue
		}
		waitFor(t, 10*time.Second, id+" takes the forged version (or a later leader's)", func() (bool, string) {
			s := statusOf(id)
			return s.ConfIndex == core.MaxTerm || s.ConfTerm > conf, fmt.Sprintf("conf %d.%d", s.ConfTerm, s.ConfIndex)
		})
	}

	members := func(op, via string) time.Duration {
		t.Helper()
		t1 := time.Now()
		code, stdout, stderr := runCLI(t, time.Minute, nil, "members", op, "a4", "--group", c.group, "--state-dir", c.stateDir(via), "--timeout", "20s")
		if code != 0 {
			t.Fatalf("members %s a4 via %s after the forged configuration: exit %d\nstdout: %s\nstderr: %s", op, via, code, stdout, stderr)
		}
		return time.Since(t1)
	}
	via := c.ids[0]
	if via == leader {
		via = c.ids[1]
	}
	took := members("add", via)
	added := time.Since(t0)
	took2 := members("remove", via)
	c.sameConfiguration(c.ids, nil)
	t.Logf("after the forged configuration: members add a4 committed in %v (%v after the forgery), remove in %v, process starts included",
		took.Round(time.Millisecond), added.Round(time.Millisecond), took2.Round(time.Millisecond))

	from, fromTerm, _ := c.waitAgreement("", term, 10*time.Second)
	t1 := time.Now()
	code, stdout, stderr := runCLI(t, 30*time.Second, nil, "resign", "--group", c.group, "--state-dir", c.stateDir(from))
	if code != 0 || !strings.Contains(stdout, "leads term") {
		t.Fatalf("resign at %s: exit %d\nstdout: %s\nstderr: %s", from, code, stdout, stderr)
	}
	to, toTerm, _ := c.waitAgreement(from, fromTerm+1, 10*time.Second)
	t.Logf("%s (term %d, was %d before the forgery) handed over to %s (term %d) in %v, process start included (%s)",
		from, fromTerm, term, to, toTerm, time.Since(t1).Round(time.Millisecond), strings.TrimSpace(stdout))
	c.stopAll()
}
