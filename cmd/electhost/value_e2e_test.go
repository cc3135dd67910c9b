package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// 200 ms / 1.2 s: at 100 ms / 600 ms a loaded runner (4 busy loops,
	// load 15-20) moved the leadership through 15 terms in the first 20 s,
	// and no step ever ran under one leadership. Nothing here is timed.
	hb, et := 200*time.Millisecond, 1200*time.Millisecond
	c, natsURL := newNATSCluster(t, hb, et)
	// The command records what it was given, then runs until stopped.
	c.command = []string{"sh", "-c", `printf '%s %s %s\n' "$ELECT_TERM" "$ELECT_ID" "$ELECT_VALUE" >> "$ELECTHOST_TEST_DIR/values"; exec sleep 1000`}
	addr := func(id string) string { return "http://" + id + ".example:8080/x?a=\"b\"" }
	// Priorities make the leaders known in advance (a1, then a2 once a1 is
	// killed): a leadership lost to load comes back to them.
	prio := map[string]string{"a1": "30", "a2": "20", "a3": "10"}
	for _, id := range c.ids {
		c.startWith(id, c.ids, "--value", addr(id), "--priority", prio[id])
	}
	// hadValue says whether leader ever announced value: its --value or a
	// value proclaimed at it (recorded before the proclaim is sent).
	proclaimed := map[string][]string{}
	hadValue := func(leader, value string) bool {
		return value == addr(leader) || slices.Contains(proclaimed[leader], value)
	}
	// paired fails the test at once if who reports a value for leader
	// that leader never had (in any term, on any path: /status, status,
	// the command's ELECT_VALUE).
	paired := func(who, leader string, term uint64, value string) {
		t.Helper()
		if leader != "" && value != "" && !hadValue(leader, value) {
			t.Fatalf("%s reports %s leading term %d with value %q, which %s never had", who, leader, term, value, leader)
		}
	}
	// everyone waits until every live agent agrees that leader leads (in
	// whatever term: a lease lost to load starts another) with value, and
	// returns the term.
	everyone := func(leader, value string) uint64 {
		t.Helper()
		var term uint64
		waitFor(t, time.Minute, "every agent reports "+leader+"'s value "+value, func() (bool, string) {
			var view []string
			ok, terms := true, map[uint64]bool{}
			for _, id := range c.ids {
				p := c.proc(id)
				if !p.alive() {
					continue
				}
				s, err := p.status()
				if err != nil {
					ok = false
					view = append(view, id+": "+err.Error())
					continue
				}
				paired(id+"'s /status", s.Leader, s.Term, s.Value)
				if s.Leader != leader || s.Value != value {
					ok = false
				}
				terms[s.Term], term = true, s.Term
				view = append(view, fmt.Sprintf("%s: %s term %d %s", id, s.Leader, s.Term, s.Value))
			}
			return ok && len(terms) == 1, strings.Join(view, "; ")
		})
		return term
	}
	// values are the commands' records, each checked to be its leader's.
	values := func() []string {
		t.Helper()
		lines := readLines(filepath.Join(c.shared, "values"))
		for _, l := range lines {
			f := strings.SplitN(l, " ", 3)
			if len(f) != 3 {
				t.Fatalf("bad values line %q", l)
			}
			term, _ := strconv.ParseUint(f[0], 10, 64)
			paired("the command's ELECT_VALUE", f[1], term, f[2])
		}
		return lines
	}
	// commandGot waits until a command of leader records value.
	commandGot := func(leader, value string) {
		t.Helper()
		waitFor(t, time.Minute, "a command on "+leader+" with ELECT_VALUE "+value, func() (bool, string) {
			lines := values()
			for _, l := range lines {
				if f := strings.SplitN(l, " ", 3); f[1] == leader && f[2] == value {
					return true, ""
				}
			}
			return false, strings.Join(lines, " | ")
		})
	}

	leader := "a1"
	c.waitLeads(leader, 2*time.Minute) // the first start may compile the module
	everyone(leader, addr(leader))
	commandGot(leader, addr(leader))

	// A passive listener hears it too (for two election timeouts rather
	// than its default 2 heartbeats + 300 ms, which a loaded runner can
	// spend starting the process).
	c.underLeader(leader, "electhost status", func(string, uint64) string {
		code, stdout, stderr := runCLI(t, time.Minute, nil, "status", "--group", c.group, "--broker", natsURL, "--heartbeat", hb.String(),
			"--wait", (2 * et).String(), "--json")
		var rep statusReport
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil {
			t.Fatalf("electhost status: exit %d, %+v\n%s\n%s", code, rep, stdout, stderr)
		}
		paired("electhost status", rep.Leader, rep.Term, rep.Value)
		if rep.Leader != leader || rep.Value != addr(leader) {
			return fmt.Sprintf("it reports %s at term %d with %q", rep.Leader, rep.Term, rep.Value)
		}
		return ""
	})

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
	t.Cleanup(func() { watch.Process.Kill() })
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
	// waitWatch returns the first event with value (every event checked).
	waitWatch := func(value string) watchEvent {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("status --watch ended")
				}
				paired("status --watch", ev.Leader, ev.Term, ev.Value)
				if ev.Value == value {
					return ev
				}
			case <-deadline:
				t.Fatalf("status --watch never printed value %q", value)
			}
		}
	}
	waitWatch(addr(leader))

	// proclaim at a follower: refused, naming the leader. (Registered as
	// a value a3 may have: if a3 led for a moment, it took it.)
	follower := "a3"
	proclaimed[follower] = append(proclaimed[follower], "x")
	c.underLeader(leader, "proclaim at a follower", func(string, uint64) string {
		code, _, stderr := runCLI(t, time.Minute, nil, "proclaim", "--group", c.group, "--value", "x", "--state-dir", c.stateDir(follower))
		if want := follower + " is not the leader of " + c.group + ": " + leader + " is"; code != exitFailure || !strings.Contains(stderr, want) {
			return fmt.Sprintf("exit %d, want 1 and %q: %s", code, want, stderr)
		}
		oneErrorLine(t, stderr, "is not the leader")
		return ""
	})
	// A value over the bound: a usage error, before any agent is asked.
	code, _, stderr := runCLI(t, time.Minute, nil, "proclaim", "--group", c.group, "--value", strings.Repeat("x", 1025), "--state-dir", c.stateDir(leader))
	if code != exitUsage {
		t.Fatalf("proclaim of 1025 bytes: exit %d, want 2\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, "--value: 1025 bytes, at most 1024")

	// proclaim at the leader: every follower takes it, in the same term
	// (status --watch prints it with the proclaim's term). A leadership
	// lost meanwhile is waited out with a fresh value.
	var moved string
	c.underLeader(leader, "proclaim at the leader", func(_ string, term uint64) string {
		before, err := c.proc(leader).status()
		if err != nil || before.Term != term {
			return fmt.Sprintf("%s's /status: term %d %v", leader, before.Term, err)
		}
		moved = fmt.Sprintf("http://%s.example:%d", leader, 9090+len(proclaimed[leader]))
		proclaimed[leader] = append(proclaimed[leader], moved)
		code, stdout, stderr := runCLI(t, time.Minute, nil, "proclaim", "--group", c.group, "--value", moved, "--state-dir", c.stateDir(leader), "--json")
		var prep proclaimReply
		if code != 0 || json.Unmarshal([]byte(stdout), &prep) != nil || !prep.OK {
			return fmt.Sprintf("exit %d, %+v: %s", code, prep, stderr)
		}
		if prep.Term != term || prep.Version != before.ValueVersion+1 {
			return fmt.Sprintf("proclaimed in term %d version %d; it led term %d at version %d", prep.Term, prep.Version, term, before.ValueVersion)
		}
		if ev := waitWatch(moved); ev.Leader != leader || ev.Term != term {
			return fmt.Sprintf("status --watch first printed it with %s term %d, want %s term %d", ev.Leader, ev.Term, leader, term)
		}
		return ""
	})
	everyone(leader, moved)
	watch.Process.Signal(syscall.SIGINT)
	if err := watch.Wait(); err != nil {
		t.Fatalf("status --watch after SIGINT: %v", err)
	}

	// Failover: the next leader announces its own value.
	t0 := time.Now()
	c.signal(leader, syscall.SIGKILL)
	next := "a2"
	c.waitLeads(next, time.Minute)
	nextTerm := everyone(next, addr(next))
	t.Logf("kill -9 of %s: %s (term %d) agreed and its value reported by every live agent after %v", leader, next, nextTerm, time.Since(t0).Round(time.Millisecond))
	commandGot(next, addr(next))
	values()
}
