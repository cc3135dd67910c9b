package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/transport/natstest"
)

// The hostile e2e tests: real `electhost run` processes on an embedded NATS
// server, and a forger on the same subject (forge_e2e_test.go).

// waitReplayed waits until agent id has refused at least n more replays
// than before (its /status auth counters), failing at once if it exits.
func (c *cluster) waitReplayed(id string, before, n uint64, within time.Duration) statusJSON {
	c.t.Helper()
	var s statusJSON
	waitFor(c.t, within, fmt.Sprintf("%s refuses %d replays", id, n), func() (bool, string) {
		p := c.proc(id)
		if !p.alive() {
			c.t.Fatalf("%s exited %d while replays were refused (want it running)", id, p.exitCode)
		}
		var err error
		if s, err = p.status(); err != nil || s.Auth == nil {
			return false, fmt.Sprint(err)
		}
		return s.Auth.Replayed >= before+n, fmt.Sprintf("replayed %d, was %d", s.Auth.Replayed, before)
	})
	return s
}

// replayedNow is agent id's count of refused replays.
func (c *cluster) replayedNow(id string) uint64 {
	c.t.Helper()
	s, err := c.proc(id).status()
	if err != nil || s.Auth == nil {
		c.t.Fatalf("%s /status: %v %+v", id, err, s.Auth)
	}
	return s.Auth.Replayed
}

// TestE2EOwnReplayAfterRestart: with ed25519, a member's own messages from
// an earlier run, replayed after it restarted, are replays: it refuses and
// counts them and keeps running. Before, it took the first one for another
// process with its id and exited 5 ("another process speaks as a1 …
// (incarnation OLD, ours NEW)"); after a restart of every agent, a replayed
// capture stopped all three.
func TestE2EOwnReplayAfterRestart(t *testing.T) {
	url, _ := natstest.Start(t)
	c := newCluster(t, 3, []string{"--transport", "nats", "--broker", url}, nil,
		100*time.Millisecond, 600*time.Millisecond, 20*time.Millisecond)
	c.group = "e2e-replay"
	keys, membersFile := c.keygen()
	f := newForger(t, url, c.group)
	for _, id := range c.ids {
		c.startAuthAgent(id, keys[id], membersFile)
	}
	c.waitBestLeader(90 * time.Second)
	own := func(id string) func(captured) bool {
		return func(m captured) bool { return m.From == id }
	}
	for _, id := range c.ids {
		f.waitCaptured(5, 10*time.Second, "messages of "+id, own(id))
	}

	// 1. a1 (the leader) is killed and restarted, then hears its own
	// messages of the run before.
	victim := c.ids[0]
	earlier := f.messages(own(victim))
	c.signal(victim, syscall.SIGKILL)
	c.waitExit(victim, 5*time.Second)
	c.startAuthAgent(victim, keys[victim], membersFile)
	c.waitAgreement("", 1, 90*time.Second)
	before := c.replayedNow(victim)
	f.replay(earlier)
	s := c.waitReplayed(victim, before, uint64(len(earlier)), 15*time.Second)
	if s.DuplicateIDs != 0 {
		t.Fatalf("%s reported %d duplicate ids (%s) for its own replayed messages", victim, s.DuplicateIDs, s.LastDuplicateID)
	}
	t.Logf("%s refused its %d own messages of the run before its restart as replays", victim, len(earlier))

	// 2. Every agent is killed and restarted; the whole capture (both runs
	// so far) is replayed.
	capture := f.messages(nil)
	for _, id := range c.ids {
		c.signal(id, syscall.SIGKILL)
		c.waitExit(id, 5*time.Second)
	}
	for _, id := range c.ids {
		c.startAuthAgent(id, keys[id], membersFile)
	}
	leader, term := c.waitBestLeader(90 * time.Second)
	befores := map[string]uint64{}
	for _, id := range c.ids {
		befores[id] = c.replayedNow(id)
	}
	t0 := time.Now()
	f.replay(capture)
	for _, id := range c.ids {
		n := 0
		for _, m := range capture {
			if m.From == id {
				n++
			}
		}
		s := c.waitReplayed(id, befores[id], uint64(n), 15*time.Second)
		if s.DuplicateIDs != 0 {
			t.Fatalf("%s reported %d duplicate ids (%s) for replayed messages", id, s.DuplicateIDs, s.LastDuplicateID)
		}
	}
	t.Logf("a capture of %d messages replayed after every agent restarted: all refused their own as replays within %v", len(capture), time.Since(t0).Round(time.Millisecond))
	if l, tm, _ := c.waitAgreement("", 1, 10*time.Second); l != leader || tm != term {
		t.Fatalf("after the replay %s leads term %d, want %s term %d", l, tm, leader, term)
	}
	for _, id := range c.ids {
		if n := len(c.proc(id).logLines("duplicate agent id")); n != 0 {
			t.Errorf("%s logged %d duplicate-id lines", id, n)
		}
	}
	c.stopAll()
}

