package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2ELeaderValue: the leader value with real processes over an
// embedded NATS server. Three agents, each with --value (its own address):
//
//   - every follower's /status, and a passive `electhost status`, shows the
//     leader's value; the leader-only command gets it as ELECT_VALUE;
//   - `electhost proclaim` at a follower is refused, naming the leader; at
//     the leader it changes the value on every follower (and in `status
//     --watch`) without a new term;
//   - kill -9 of the leader: the new leader's value replaces it everywhere,
//     and its command gets its own value.
func TestE2ELeaderValue(t *testing.T) {
	t.Parallel()
	hb, et := 100*time.Millisecond, 600*time.Millisecond
	c, natsURL := newNATSCluster(t, hb, et)
	// The command records what it was given, then runs until stopped.
	c.command = []string{"sh", "-c", `printf '%s %s %s\n' "$ELECT_TERM" "$ELECT_ID" "$ELECT_VALUE" >> "$ELECTHOST_TEST_DIR/values"; exec sleep 1000`}
	addr := func(id string) string { return "http://" + id + ".example:8080/x?a=\"b\"" }
	// Priorities make the leaders known in advance (a1, then a2 once a1 is
	// killed), so no priority hand-off moves leadership mid-test.
	prio := map[string]string{"a1": "30", "a2": "20", "a3": "10"}
	for _, id := range c.ids {
		c.startWith(id, c.ids, "--value", addr(id), "--priority", prio[id])
	}
	// everyone waits until every live agent reports leader's value in term.
	everyone := func(leader string, term uint64, value string) {
		t.Helper()
		waitFor(t, 20*time.Second, "every agent reports "+leader+"'s value "+value, func() (bool, string) {
			var view []string
			ok := true
			for _, id := range c.ids {
				p := c.proc(id)
				if !p.alive() {
					continue
				}
				s, err := p.status()
				if err != nil || s.Leader != leader || s.Term != term || s.Value != value {
					ok = false
				}
				view = append(view, id+": "+s.Leader+" "+s.Value)
			}
			return ok, strings.Join(view, "; ")
		})
	}
	// commandGot waits until the command of term on leader recorded value.
	commandGot := func(leader string, term uint64, value string) {
		t.Helper()
		want := strconv.FormatUint(term, 10) + " " + leader + " " + value
		waitFor(t, 20*time.Second, "ELECT_VALUE "+want, func() (bool, string) {
			lines := readLines(filepath.Join(c.shared, "values"))
			for _, l := range lines {
				if l == want {
					return true, ""
				}
			}
			return false, strings.Join(lines, " | ")
		})
	}

	leader := "a1"
	term := c.waitLeads(leader, time.Minute) // the first start may compile the module
	everyone(leader, term, addr(leader))
	commandGot(leader, term, addr(leader))

	// A passive listener hears it too.
	code, stdout, stderr := runCLI(t, 30*time.Second, nil, "status", "--group", c.group, "--broker", natsURL, "--heartbeat", hb.String(), "--json")
	var rep statusReport
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || rep.Leader != leader || rep.Value != addr(leader) {
		t.Fatalf("electhost status: exit %d, %+v\n%s\n%s", code, rep, stdout, stderr)
	}

	// status --watch prints the proclaim as it happens.
	watch := exec.Command(binPath, "status", "--group", c.group, "--broker", natsURL, "--heartbeat", hb.String(), "--watch", "--json")
	watch.Env = append(os.Environ(), "ELECTCORE_WASM="+wasmPath)
	wout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	events := make(chan watchEvent, 64)
	go func() {
		sc := bufio.NewScanner(wout)
		for sc.Scan() {
			var ev watchEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
		close(events)
	}()
	waitWatch := func(value string) watchEvent {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("status --watch ended")
				}
				if ev.Value == value {
					return ev
				}
			case <-deadline:
				t.Fatalf("status --watch never printed value %q", value)
			}
		}
	}
	waitWatch(addr(leader))

	// proclaim at a follower: refused, naming the leader.
	var follower string
	for _, id := range c.ids {
		if id != leader {
			follower = id
		}
	}
	code, _, stderr = runCLI(t, 30*time.Second, nil, "proclaim", "--group", c.group, "--value", "x", "--state-dir", c.stateDir(follower))
	if code != exitFailure {
		t.Fatalf("proclaim at a follower: exit %d, want 1\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, follower+" is not the leader of "+c.group+": "+leader+" is")
	// A value over the bound: a usage error, before any agent is asked.
	code, _, stderr = runCLI(t, 30*time.Second, nil, "proclaim", "--group", c.group, "--value", strings.Repeat("x", 1025), "--state-dir", c.stateDir(leader))
	if code != exitUsage {
		t.Fatalf("proclaim of 1025 bytes: exit %d, want 2\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, "--value: 1025 bytes, at most 1024")

	// proclaim at the leader: every follower takes it, in the same term.
	moved := "http://" + leader + ".example:9090"
	code, stdout, stderr = runCLI(t, 30*time.Second, nil, "proclaim", "--group", c.group, "--value", moved, "--state-dir", c.stateDir(leader), "--json")
	var prep proclaimReply
	if code != 0 || json.Unmarshal([]byte(stdout), &prep) != nil || !prep.OK || prep.Term != term || prep.Version != 2 {
		t.Fatalf("proclaim at the leader: exit %d, %+v\n%s", code, prep, stderr)
	}
	everyone(leader, term, moved)
	if ev := waitWatch(moved); ev.Leader != leader || ev.Term != term {
		t.Fatalf("status --watch: %+v, want %s term %d", ev, leader, term)
	}
	watch.Process.Signal(syscall.SIGINT)
	if err := watch.Wait(); err != nil {
		t.Fatalf("status --watch after SIGINT: %v", err)
	}

	// Failover: the next leader announces its own value.
	t0 := time.Now()
	c.signal(leader, syscall.SIGKILL)
	next := "a2"
	nextTerm := c.waitLeads(next, 30*time.Second)
	everyone(next, nextTerm, addr(next))
	t.Logf("kill -9 of %s: %s (term %d) agreed and its value reported by every live agent after %v", leader, next, nextTerm, time.Since(t0).Round(time.Millisecond))
	commandGot(next, nextTerm, addr(next))
}
