package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/transport/natstest"
)

// TestE2EResignTransferWatch: the operator's commands against running
// agents: `status --watch --json` prints each
// leader change as NDJSON; `electhost resign --to` hands over through the
// 0600 control socket; a follower refuses; POST /resign over --http needs
// the token file; a state directory without an agent is exit 3.
func TestE2EResignTransferWatch(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: nothing here is a timing promise, and at 100 ms /
	// 600 ms a loaded runner loses leases. A step whose leadership was
	// lost to load runs again (leadership_e2e_test.go).
	hb, et := 200*time.Millisecond, 1200*time.Millisecond
	c, natsURL := newNATSCluster(t, hb, et)
	// a1 outranks the others: whoever wins first hands over to it after two
	// election timeouts of steady contact, so the test starts from a1's
	// leadership, which nothing but the operator moves (default priorities
	// made a slow step of this test race that hand-off).
	for i, id := range c.ids {
		c.startWith(id, c.ids, "--priority", strconv.Itoa(10*(len(c.ids)-i)))
	}
	leader := c.ids[0]
	term := c.waitLeads(leader, 2*time.Minute) // the first start may compile the module
	// Each leadership below is held until its command runs: a hand-off's
	// successor takes its lease only after the resigner's hold, and the
	// command needs a process start, so a test moving on at once could see
	// every term end before any command had run.
	_, term = c.waitCommandFrom("", term, time.Minute)

	// The watcher: NDJSON on stdout until SIGINT.
	watch := exec.Command(binPath, "status", "--group", c.group, "--broker", natsURL, "--heartbeat", hb.String(), "--watch", "--json")
	watch.Env = append(os.Environ(), "ELECTCORE_WASM="+wasmPath)
	wout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed however the test ends: a watcher outliving its test holds
	// whatever the test's parent passed it (a locked run's lock).
	t.Cleanup(func() { watch.Process.Kill() })
	events := make(chan watchEvent, 64)
	go func() {
		sc := bufio.NewScanner(wout)
		for sc.Scan() {
			var ev watchEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("status --watch --json line %q: %v", sc.Text(), err)
				continue
			}
			events <- ev
		}
		close(events)
	}()
	waitWatch := func(leader string, minTerm uint64) watchEvent {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("status --watch ended")
				}
				if ev.Leader == leader && ev.Term >= minTerm && ev.Group == c.group {
					return ev
				}
			case <-deadline:
				t.Fatalf("status --watch never printed leader %s at term >= %d", leader, minTerm)
			}
		}
	}
	waitWatch(leader, term)

	sock := filepath.Join(c.stateDir(leader), controlSocketName)
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket %s: %v %v, want a socket with mode 0600", sock, st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(c.stateDir(leader), controlTokenName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("control token: %v %v, want mode 0600", st, err)
	}

	// A follower refuses, naming the leader.
	var follower, target string
	for _, id := range c.ids {
		if id != leader {
			if follower == "" {
				follower = id
			} else {
				target = id
			}
		}
	}
	c.underLeader(leader, "resign at a follower", func(string, uint64) string {
		code, _, stderr := runCLI(t, time.Minute, nil, "resign", "--group", c.group, "--state-dir", c.stateDir(follower))
		if want := follower + " is not the leader of " + c.group + ": " + leader + " is"; code != exitFailure || !strings.Contains(stderr, want) {
			return fmt.Sprintf("exit %d, want 1 and %q: %s", code, want, stderr)
		}
		oneErrorLine(t, stderr, "is not the leader of")
		return ""
	})

	// Transfer to a named member.
	var newTerm uint64
	_, term = c.underLeader(leader, "resign --to "+target, func(_ string, term uint64) string {
		t0 := time.Now()
		code, stdout, stderr := runCLI(t, time.Minute, nil, "resign", "--group", c.group, "--state-dir", c.stateDir(leader), "--to", target)
		if code != 0 || !strings.Contains(stdout, target+" leads term") {
			return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		t.Logf("electhost resign --to %s: %v, process start included (%s)", target, time.Since(t0).Round(time.Millisecond), strings.TrimSpace(stdout))
		return ""
	})
	waitWatch(target, term+1)
	newTerm = c.waitLeads(target, time.Minute)
	c.waitCommand(target, newTerm, time.Minute)

	// POST /resign over --http: 401 without the token, done with it.
	addr, err := c.proc(target).addr() // it answered waitAgreement: it listens
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Post("http://"+addr+"/resign?group="+c.group, "", nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /resign without a token: %v %v, want 401", resp, err)
	}
	resp.Body.Close()
	token, err := os.ReadFile(filepath.Join(c.stateDir(target), controlTokenName))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/resign?group="+c.group+"&to="+leader, nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err = httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var rep resignReply
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if resp.StatusCode != 200 || !rep.OK || rep.From != target {
		t.Fatalf("POST /resign with the token: %d %+v", resp.StatusCode, rep)
	}
	l, lastTerm, _ := c.waitAgreement(target, newTerm+1, time.Minute)
	if l != leader {
		t.Fatalf("after POST /resign to %s: %s leads", leader, l)
	}
	c.waitCommandFrom(target, lastTerm, time.Minute)
	waitWatch(leader, newTerm+1)

	// No agent behind a state directory.
	code, _, stderr := runCLI(t, time.Minute, nil, "resign", "--group", c.group, "--state-dir", t.TempDir())
	if code != exitConfig {
		t.Fatalf("resign without an agent: exit %d, want 3\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, "no electhost run agent answers")

	watch.Process.Signal(syscall.SIGINT)
	if err := watch.Wait(); err != nil {
		t.Fatalf("status --watch after SIGINT: %v, want exit 0", err)
	}
	for _, id := range c.ids {
		c.signal(id, syscall.SIGTERM)
	}
	for _, id := range c.ids {
		if code := c.waitExit(id, time.Minute); code != 0 {
			t.Fatalf("%s exit %d", id, code)
		}
		if _, err := os.Stat(filepath.Join(c.stateDir(id), controlSocketName)); !os.IsNotExist(err) {
			t.Fatalf("%s left its control socket behind: %v", id, err)
		}
	}
	c.checkCommandLog()
}

// TestE2ERunOnce: run --once runs the command once when leading, resigns
// and exits with its exit code (a killed command: 128+signal), like consul
// lock.
func TestE2ERunOnce(t *testing.T) {
	t.Parallel()
	natsURL, _ := natstest.Start(t)
	for _, c := range []struct {
		script string
		code   int
	}{
		{`test "$ELECT_TERM" -ge 1 && test "$ELECT_LEADER" = solo`, 0},
		{"exit 7", 7},
		{"kill -KILL $$", 137},
	} {
		out := filepath.Join(t.TempDir(), "ran")
		// 500 ms / 2 s: a group of one renews its lease from its own
		// heartbeats; at 100 ms / 600 ms a CI run at load 30 stalled past it
		// while the command ran, and --once exited 1 (lost the leadership).
		code, _, stderr := runCLI(t, 60*time.Second, nil, "run", "--once", "--group", "once", "--id", "solo", "--members", "solo",
			"--heartbeat", "500ms", "--election-timeout", "2s", "--state-dir", t.TempDir(), "--broker", natsURL,
			"--", "sh", "-c", "echo ran >> "+out+"; "+c.script)
		if code != c.code {
			t.Fatalf("%q: exit %d, want %d\n%s", c.script, code, c.code, stderr)
		}
		if lines := readLines(out); len(lines) != 1 {
			t.Fatalf("%q ran %d times, want once", c.script, len(lines))
		}
		if strings.Contains(stderr, "electhost: ") {
			t.Fatalf("%q: an error line for the command's own exit code:\n%s", c.script, stderr)
		}
	}
	code, _, stderr := runCLI(t, 30*time.Second, nil, "run", "--once", "--group", "once", "--id", "solo", "--members", "solo")
	if code != exitUsage {
		t.Fatalf("--once without a command: exit %d\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, "--once needs the command")
}

// TestE2EDuplicateID: a second process started with a running agent's --id
// (its own state directory) is detected through the incarnation on the
// wire. The newcomer, hearing the other for an election timeout while it
// starts, refuses to go on (exit 5, one line naming the fix); the agent that
// was running first keeps running and says so; the group keeps its leader.
// Before, whichever heard the other stopped: sometimes both.
func TestE2EDuplicateID(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: the start window is counted in election timeouts,
	// and at 100 ms / 600 ms a loaded runner loses leases.
	hb, et := 200*time.Millisecond, 1200*time.Millisecond
	c, natsURL := newNATSCluster(t, hb, et)
	c.startAll()
	c.waitAgreement("", 1, 2*time.Minute) // the first start may compile the module
	dupID := c.ids[0]
	orig := c.proc(dupID)
	c.waitUp(dupID, startWindow*et+et) // past its start window

	// The duplicate: same --id, its own state directory, no command.
	dup := exec.Command(binPath, "run", "--group", c.group, "--id", dupID, "--members", strings.Join(c.ids, ","),
		"--heartbeat", hb.String(), "--election-timeout", et.String(), "--state-dir", filepath.Join(c.root, "dup-state"), "--broker", natsURL)
	dup.Env = append(os.Environ(), "ELECTCORE_WASM="+wasmPath)
	var dupErr strings.Builder
	dup.Stderr = &dupErr
	t0 := time.Now()
	if err := dup.Start(); err != nil {
		t.Fatal(err)
	}
	dupDone := make(chan error, 1)
	go func() { dupDone <- dup.Wait() }()
	defer func() {
		dup.Process.Kill()
		<-dupDone
	}()
	select {
	case err := <-dupDone:
		dupDone <- err // for the deferred Wait
		var ee *exec.ExitError
		if !asExit(err, &ee) || ee.ExitCode() != exitDuplicateID {
			t.Fatalf("the duplicate: %v, want exit %d\n%s", err, exitDuplicateID, dupErr.String())
		}
		last := lastLine(dupErr.String())
		if !strings.HasPrefix(last, "electhost: another process runs with --id "+dupID) || !strings.Contains(last, "give every agent its own --id") {
			t.Fatalf("the duplicate's last line: %q", last)
		}
		t.Logf("the duplicate stopped after %v (module load included)", time.Since(t0).Round(time.Millisecond))
	case <-orig.done:
		t.Fatalf("the original %s exited %d; the newcomer should have", dupID, orig.exitCode)
	case <-time.After(60 * time.Second):
		t.Fatal("the duplicate did not stop within 60s")
	}
	// The original heard it, said so, and runs on.
	c.waitLog(dupID, "keeps running", time.Minute)
	if !orig.alive() {
		t.Fatalf("the original %s exited %d", dupID, orig.exitCode)
	}
	s, err := orig.status()
	if err != nil || s.DuplicateIDs == 0 {
		t.Fatalf("the original's /status: %+v %v", s, err)
	}
	leader, term, _ := c.waitAgreement("", 1, time.Minute)
	t.Logf("after the duplicate: %s leads term %d", leader, term)
	c.stopAll()
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
