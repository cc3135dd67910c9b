package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// onceAgent is an `electhost run --once` process whose stderr goes to a file.
type onceAgent struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	code int
}

func startOnce(t *testing.T, c *cluster, id string, extra ...string) *onceAgent {
	t.Helper()
	a := &onceAgent{log: filepath.Join(c.root, id+".once.log"), done: make(chan struct{})}
	args := []string{"run", "--once", "--group", c.group, "--id", id, "--members", strings.Join(c.ids, ","),
		"--heartbeat", c.hb.String(), "--election-timeout", c.et.String(), "--state-dir", filepath.Join(c.root, "state-"+id)}
	args = append(append(args, c.transport...), extra...)
	a.cmd = exec.Command(binPath, args...)
	a.cmd.Env = append(os.Environ(), "ELECTCORE_WASM="+wasmPath)
	f, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stderr, a.cmd.Stdout = f, f
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := a.cmd.Wait()
		f.Close()
		var ee *exec.ExitError
		if asExit(err, &ee) {
			a.code = ee.ExitCode()
		}
		close(a.done)
	}()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.done
	})
	return a
}

func (a *onceAgent) stderr() string { b, _ := os.ReadFile(a.log); return string(b) }

func (a *onceAgent) waitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(a.stderr(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the --once agent's log within a minute:\n%s", want, a.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *onceAgent) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-a.done:
		return a.code
	case <-time.After(60 * time.Second):
		t.Fatalf("the --once agent did not exit within 60s:\n%s", a.stderr())
		return 0
	}
}

// TestE2ERunOnceWaitingVisibly: run --once in a group whose leader is a
// long-running member with a higher priority (the setup the docs
// recommend) says while it waits who leads and why it is not this agent;
// --timeout gives up with exit 7 and SIGTERM before the command ran exits
// 8, both with one line saying the command never ran; with a higher
// priority it is handed the leadership and runs; SIGTERM while the command
// runs exits with the command's status.
func TestE2ERunOnceWaitingVisibly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "5s", "--", "true"}, "--timeout is how long --once waits to lead: give --once too"},
		{[]string{"--once", "--timeout", "-1s", "--", "true"}, "--timeout must not be negative"},
		{[]string{"--containment", "cgroup"}, "--containment is the leader-only command's, but no command is given"},
		{[]string{"--containment", "jail", "--", "true"}, `--containment "jail": want auto, cgroup, subreaper or process-group`},
	} {
		code, _, stderr := runCLI(t, 30*time.Second, nil, append([]string{"run", "--group", "g", "--id", "a", "--members", "a"}, c.args...)...)
		if code != exitUsage {
			t.Fatalf("%v: exit %d, want %d\n%s", c.args, code, exitUsage, stderr)
		}
		oneErrorLine(t, stderr, c.want)
	}
	// 200 ms / 1.2 s: the --timeout line must name a leader, and at 100 ms
	// / 600 ms a loaded runner loses leases.
	c, _ := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	keepers := c.ids[:2]
	job := c.ids[2]
	for _, id := range keepers {
		c.startWith(id, c.ids, "--priority", "1000")
	}
	leader, term, _ := c.waitAgreement(job, 1, 2*time.Minute) // the first start may compile the module
	t.Logf("%s leads term %d", leader, term)
	ran := filepath.Join(c.root, "ran")
	script := "echo x >> " + ran + "; exec sleep 1000"

	// --timeout: gives up, exit 7, and the command never ran. The timeout
	// runs from the agent's start: 15 s leaves it time to start and
	// say it waits (at load 20 it joined 7 s after its start, and with 5 s
	// it timed out at once, never having waited).
	a := startOnce(t, c, job, "--priority", "1", "--timeout", "15s", "--", "sh", "-c", script)
	a.waitLog(t, "--once: waiting to lead")
	if code := a.wait(t); code != exitOnceTimeout {
		t.Fatalf("--timeout: exit %d, want %d\n%s", code, exitOnceTimeout, a.stderr())
	}
	last := lastLine(a.stderr())
	if !strings.HasPrefix(last, "electhost: --once: this agent did not lead group "+c.group+" within --timeout 15s") ||
		!strings.Contains(last, "the command never ran") || !strings.Contains(last, " leads term ") || !strings.Contains(last, "keeps the leadership") {
		t.Fatalf("--timeout's last line: %q", last)
	}
	if !strings.Contains(a.stderr(), `msg="--once: waiting to lead"`) || !strings.Contains(a.stderr(), " leads term ") {
		t.Fatalf("the waiting log does not name the leader:\n%s", a.stderr())
	}

	// SIGTERM before the command ran: exit 8.
	a = startOnce(t, c, job, "--priority", "1", "--", "sh", "-c", script)
	a.waitLog(t, "--once: waiting to lead")
	a.cmd.Process.Signal(syscall.SIGTERM)
	if code := a.wait(t); code != exitOnceNotRun {
		t.Fatalf("SIGTERM while waiting: exit %d, want %d\n%s", code, exitOnceNotRun, a.stderr())
	}
	if last := lastLine(a.stderr()); !strings.HasPrefix(last, "electhost: --once: stopped by a signal before this agent led group "+c.group) {
		t.Fatalf("SIGTERM while waiting, last line: %q", last)
	}
	if lines := readLines(ran); len(lines) != 0 {
		t.Fatalf("the command ran %d times while this agent never led", len(lines))
	}

	// A higher priority: the leader hands over, the command runs; SIGTERM
	// while it runs stops it and exits with its status (sh killed by
	// SIGTERM: 143).
	a = startOnce(t, c, job, "--priority", "2000", "--timeout", "60s", "--", "sh", "-c", "echo x >> "+ran+"; sleep 1000")
	deadline := time.Now().Add(time.Minute)
	for len(readLines(ran)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the higher-priority --once agent's command did not run within a minute:\n%s", a.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	if code := a.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("SIGTERM while the command ran: exit %d, want %d\n%s", code, 128+int(syscall.SIGTERM), a.stderr())
	}
	if strings.Contains(a.stderr(), "electhost: ") {
		t.Fatalf("an error line for the command's own status:\n%s", a.stderr())
	}
}
