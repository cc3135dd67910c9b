package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/transport/natstest"
)

// TestE2EForgedConfigFromOutsider: with auth off, anyone on the bus can
// publish; a `config` from a non-member naming another member set and a
// far newer version must not take the group: the members keep their
// configuration, a leader, and take a membership change after it.
func TestE2EForgedConfigFromOutsider(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: nothing here is a timing promise, and at 100 ms /
	// 600 ms a loaded runner loses leases.
	c, url := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	c.group = "e2e-forgedconfig"
	f := newForger(t, url, c.group)
	founders := append([]string(nil), c.ids...)
	for _, id := range founders {
		c.start(id)
	}
	leader, term, _ := c.waitAgreement("", 1, 2*time.Minute) // the first start may compile the module

	// Mallory's configuration: one member nobody runs, a version far ahead,
	// sent as a leader would until it commits (every heartbeat, 2 s).
	forged := f.forge(map[string]any{"type": "config", "from": "mallory", "term": term,
		"conf_term": term + 1000, "conf_index": 1 << 40, "members": []string{"zz"}})
	for range 20 {
		f.publish(forged)
		time.Sleep(c.hb) // paced like a leader's resends
	}
	// Each follower has read and refused them (its debug log says why), not
	// merely not read them yet; a leader ignores any configuration but its
	// own without a word.
	waitFor(t, time.Minute, "every follower refuses mallory's configs", func() (bool, string) {
		for _, id := range founders {
			if id == leader {
				continue
			}
			refused := false
			for _, l := range c.proc(id).logLines("input rejected") {
				if r, _ := l["reason"].(string); strings.Contains(r, "mallory") {
					refused = true
				}
			}
			if !refused {
				return false, id + " has logged no refusal of mallory's config"
			}
		}
		return true, ""
	})
	for _, id := range founders {
		s, err := c.proc(id).status()
		if err != nil || !s.Voter || len(s.Members) != 3 {
			t.Fatalf("%s after the forged config: voter=%v members=%v %v", id, s.Voter, s.Members, err)
		}
	}
	leader, term, _ = c.waitAgreement("", term, time.Minute)

	// The group still takes a change: a4 joins through the leader.
	c.startWith("a4", founders, "--join")
	c.ids = append(c.ids, "a4")
	out := c.change("add", "a4", leader)
	c.sameConfiguration([]string{"a1", "a2", "a3", "a4"}, nil)
	t.Logf("after 20 forged configs from mallory: %s leads term %d; %s", leader, term, strings.TrimSpace(out))
	c.checkCommandLog()
}

// TestE2EForgedHoldlessResign: with auth off, a `resign` in the leader's
// name without `hold` names a follower as successor, while the leader's
// command takes 800 ms of its 900 ms grace to stop (longer than a command
// takes to start, so that an early start shows). The successor must not
// start its command before the old one has stopped: the commands' own
// start/stop timestamps (and their lock) show no overlap.
func TestE2EForgedHoldlessResign(t *testing.T) {
	t.Parallel()
	url, _ := natstest.Start(t)
	c := newCluster(t, 3, []string{"--transport", "nats", "--broker", url}, []string{"ELECTHOST_TEST_STOP_DELAY=800ms"},
		100*time.Millisecond, 2*time.Second, 20*time.Millisecond)
	c.group = "e2e-holdless"
	f := newForger(t, url, c.group)
	for _, id := range c.ids {
		c.startWith(id, c.ids, "--grace", "900ms")
	}
	leader, term, _ := c.waitAgreement("", 1, 2*time.Minute) // the first start may compile the module
	// Its command, or a later leader's (a lease lost to load).
	leader, term = c.waitCommandFrom("", term, time.Minute)
	hb := f.waitCaptured(1, time.Minute, "heartbeats of "+leader, func(m captured) bool {
		return m.Type == "heartbeat" && m.From == leader && m.Term == term
	})
	var fields map[string]any
	if err := json.Unmarshal(hb[len(hb)-1].Raw, &fields); err != nil {
		t.Fatal(err)
	}
	var to string
	for _, id := range c.ids {
		if id != leader {
			to = id
			break
		}
	}
	resign := map[string]any{"type": "resign", "from": leader, "leader": leader, "term": term, "to": to}
	for _, k := range []string{"priority", "inc", "conf_term", "conf_index"} {
		if v, ok := fields[k]; ok {
			resign[k] = v
		}
	}
	f.publish(f.forge(resign))
	c.waitCommandFrom(leader, term+1, time.Minute)
	c.checkCommandLog() // no start before the previous stop; no lock found held
	t.Logf("forged hold-less resign %s → %s in term %d: the next command started after the old one stopped", leader, to, term)
}
