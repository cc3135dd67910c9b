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
	// 200 ms / 1.2 s: nothing here is a timing promise, and at 100 ms /
	// 600 ms a loaded runner loses leases.
	c, url := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	c.group = "e2e-conf-index"
	f := newForger(t, url, c.group)
	c.startAll()
	statusOf := func(id string) statusJSON {
		t.Helper()
		s, err := c.proc(id).status()
		if err != nil {
			t.Fatalf("%s /status: %v", id, err)
		}
		return s
	}
	leader, term := c.waitHandoffReady(1, 2*time.Minute) // the first start may compile the module
	conf := term

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
		waitFor(t, time.Minute, id+" refuses the config at 2^53−1, 2^64−1", func() (bool, string) {
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
		waitFor(t, time.Minute, id+" takes the forged version (or a later leader's)", func() (bool, string) {
			s := statusOf(id)
			return s.ConfIndex == core.MaxTerm || s.ConfTerm > conf, fmt.Sprintf("conf %d.%d", s.ConfTerm, s.ConfIndex)
		})
	}

	via := c.ids[0]
	if via == leader {
		via = c.ids[1]
	}
	c.change("add", "a4", via)
	t.Logf("after the forged configuration: members add a4 committed %v after the forgery", time.Since(t0).Round(time.Millisecond))
	c.change("remove", "a4", via)
	c.sameConfiguration(c.ids, nil)

	// A hand-off: the leader resigns, and another leads the next term.
	t1 := time.Now()
	var stdout string
	from, fromTerm := c.underLeader("", "resign", func(from string, fromTerm uint64) string {
		t1 = time.Now()
		code, out, stderr := runCLI(t, time.Minute, nil, "resign", "--group", c.group, "--state-dir", c.stateDir(from))
		stdout = out
		if code != 0 || !strings.Contains(stdout, "leads term") {
			return fmt.Sprintf("resign at %s: exit %d\nstdout: %s\nstderr: %s", from, code, stdout, stderr)
		}
		return ""
	})
	to, toTerm, _ := c.waitAgreement(from, fromTerm+1, time.Minute)
	t.Logf("%s (term %d, was %d before the forgery) handed over to %s (term %d) in %v, process start included (%s)",
		from, fromTerm, term, to, toTerm, time.Since(t1).Round(time.Millisecond), strings.TrimSpace(stdout))
	c.stopAll()
}
