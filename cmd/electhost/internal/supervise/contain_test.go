//go:build linux

package supervise

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The containment tests run real process trees under the shim (this test
// binary, re-executed) and find their processes by a mark in their
// environment, which every descendant inherits, double-forked and setsid'd
// ones included.

const markVar = "SUPERVISE_TEST_MARK"

// Commands: one that forks and waits, and one whose descendants leave its
// session (setsid) and are orphaned at once (double fork); one of them
// ignores SIGTERM, so only SIGKILL stops it.
const (
	forkingCmd  = `sleep 1000 & sleep 1000 & wait`
	escapingCmd = `(setsid sh -c 'sleep 1000 & wait' &)
(setsid sh -c 'trap "" TERM; sleep 1000 & wait' &)
sleep 1000 & wait`
)

// marked lists the live processes carrying mark, shims included.
func marked(mark string) []int {
	ents, _ := os.ReadDir("/proc")
	want := []byte(markVar + "=" + mark + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(b, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// markedCmd lists those of the command (not its shim).
func markedCmd(mark string) []int {
	var out []int
	for _, pid := range marked(mark) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if !bytes.Contains(b, []byte(ShimArg)) {
			out = append(out, pid)
		}
	}
	return out
}

func newMark(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano())
}

// waitMarked waits until at least n processes carry mark.
func waitMarked(t *testing.T, mark string, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d marked processes", n), time.Minute, func() bool { return len(markedCmd(mark)) >= n })
}

// containments are the ones this machine offers, best first.
func containments(t *testing.T) []Containment {
	var out []Containment
	for _, c := range []Containment{ContainCgroup, ContainSubreaper, ContainProcessGroup} {
		if _, _, err := probe(c); err == nil {
			out = append(out, c)
		} else {
			t.Logf("containment %s not available here: %v", c, err)
		}
	}
	return out
}

func newShimmed(t *testing.T, c Containment, mark, script string, grace time.Duration) *Supervisor {
	t.Helper()
	s, err := New(Options{Path: "sh", Args: []string{"-c", script}, Env: []string{markVar + "=" + mark},
		Grace: grace, Shim: os.Args[0], Contain: c, BackoffMin: time.Hour, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestContainStopsWholeTree: a stop leaves no process of the command once
// Run returns, whatever the tree did: forked children, and with a cgroup or
// a subreaper, double-forked setsid'd ones, one of them ignoring SIGTERM.
func TestContainStopsWholeTree(t *testing.T) {
	for _, c := range containments(t) {
		cases := []struct {
			name, script string
			procs        int
		}{{"forking", forkingCmd, 3}}
		if c != ContainProcessGroup { // a process group cannot hold setsid'd descendants
			cases = append(cases, struct {
				name, script string
				procs        int
			}{"setsid-double-fork", escapingCmd, 6})
		}
		for _, tc := range cases {
			t.Run(string(c)+"/"+tc.name, func(t *testing.T) {
				mark := newMark(t)
				s := newShimmed(t, c, mark, tc.script, 200*time.Millisecond)
				ctx, cancel := context.WithCancel(context.Background())
				done := runAsync(t, s, ctx)
				waitMarked(t, mark, tc.procs)
				if got, _ := s.Containment(); got != c {
					t.Fatalf("containment %s in force, want %s", got, c)
				}
				cancel()
				<-done
				if left := marked(mark); len(left) > 0 {
					t.Fatalf("Run returned with processes of the command alive: %v", left)
				}
			})
		}
	}
}

// TestContainLeftoversOfExitedCommand: a command that exits leaving
// setsid'd orphans behind takes them with it.
func TestContainLeftoversOfExitedCommand(t *testing.T) {
	for _, c := range containments(t) {
		if c == ContainProcessGroup {
			continue
		}
		t.Run(string(c), func(t *testing.T) {
			mark := newMark(t)
			dir := t.TempDir()
			script := `(setsid sh -c 'trap "" TERM; sleep 1000 & wait' &); while [ ! -e "$GO" ]; do sleep 0.01; done; exit 3`
			s, err := New(Options{Path: "sh", Args: []string{"-c", script}, Env: []string{markVar + "=" + mark, "GO=" + filepath.Join(dir, "go")},
				Grace: time.Second, Shim: os.Args[0], Contain: c})
			if err != nil {
				t.Fatal(err)
			}
			type res struct {
				code   int
				exited bool
				err    error
			}
			done := make(chan res, 1)
			go func() {
				code, exited, err := s.RunOnce(context.Background())
				done <- res{code, exited, err}
			}()
			waitMarked(t, mark, 3)
			os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
			r := <-done
			if r.err != nil || !r.exited || r.code != 3 {
				t.Fatalf("RunOnce: code %d exited %v err %v, want exit 3", r.code, r.exited, r.err)
			}
			if left := marked(mark); len(left) > 0 {
				t.Fatalf("leftovers alive after the command exited: %v", left)
			}
		})
	}
}

// treeHelperMain is a supervisor process for the tests below: it runs the
// escaping command under the shim with the containment, grace and
// deadline (ms from now, 0 none) from its environment, prints "ready" once
// it started, and never returns.
func treeHelperMain() {
	c := Containment(os.Getenv("SUPERVISE_TREE_HELPER"))
	grace, _ := time.ParseDuration(os.Getenv("SUPERVISE_GRACE"))
	s, err := New(Options{Path: "sh", Args: []string{"-c", escapingCmd}, Grace: grace, Shim: os.Args[0], Contain: c,
		Env:        []string{markVar + "=" + os.Getenv("SUPERVISE_CMD_MARK")},
		BackoffMin: time.Hour, BackoffMax: time.Hour,
		OnStart: func(int) { fmt.Println("ready") }})
	if err != nil {
		fmt.Println(err)
		os.Exit(5)
	}
	if ms, _ := strconv.Atoi(os.Getenv("SUPERVISE_DEADLINE_MS")); ms > 0 {
		s.SetDeadline(time.Now().Add(time.Duration(ms) * time.Millisecond))
	}
	s.Run(context.Background())
	os.Exit(6)
}

func startTreeHelper(t *testing.T, c Containment, mark string, grace time.Duration, deadlineMs int) *exec.Cmd {
	t.Helper()
	h := exec.Command(os.Args[0], "-test.run=^$")
	h.Env = append(os.Environ(), "SUPERVISE_TREE_HELPER="+string(c), "SUPERVISE_CMD_MARK="+mark,
		"SUPERVISE_GRACE="+grace.String(), "SUPERVISE_DEADLINE_MS="+strconv.Itoa(deadlineMs))
	out, err := h.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Process.Signal(syscall.SIGCONT)
		h.Process.Kill()
		h.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper: %q", line)
	}
	return h
}

// TestContainSupervisorKilled: kill -9 of the process that runs the
// supervisor (electhost) leaves no process of the command: the shim hears
// of it (control pipe EOF, PR_SET_PDEATHSIG) and stops the whole tree.
func TestContainSupervisorKilled(t *testing.T) {
	for _, c := range containments(t) {
		if c == ContainProcessGroup {
			continue
		}
		t.Run(string(c), func(t *testing.T) {
			mark := newMark(t)
			grace := 300 * time.Millisecond
			h := startTreeHelper(t, c, mark, grace, 0)
			waitMarked(t, mark, 6)
			t0 := time.Now()
			h.Process.Kill()
			h.Wait()
			waitFor(t, "every process of the command to be gone", time.Minute, func() bool { return len(marked(mark)) == 0 })
			t.Logf("%s: kill -9 of the supervisor to the last process gone: %v (grace %v; one process ignores SIGTERM)", c, time.Since(t0).Round(time.Millisecond), grace)
		})
	}
}

// TestContainDeadlineWithoutSupervisor: the shim stops the tree at the
// deadline it was given, SIGKILL included, while the supervisor's process
// is frozen (SIGSTOP), i.e. without the supervisor ever being scheduled.
func TestContainDeadlineWithoutSupervisor(t *testing.T) {
	for _, c := range containments(t) {
		if c == ContainProcessGroup {
			continue
		}
		t.Run(string(c), func(t *testing.T) {
			mark := newMark(t)
			h := startTreeHelper(t, c, mark, 200*time.Millisecond, 3000)
			waitMarked(t, mark, 6)
			if err := h.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the frozen supervisor's command to be stopped at its deadline", time.Minute, func() bool { return len(marked(mark)) == 0 })
		})
	}
}

// attrHandler keeps every attribute the supervisor logs, by key, in order.
type attrHandler struct {
	mu    sync.Mutex
	attrs map[string][]slog.Value
}

func (h *attrHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *attrHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *attrHandler) WithGroup(string) slog.Handler            { return h }
func (h *attrHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.attrs == nil {
		h.attrs = map[string][]slog.Value{}
	}
	r.Attrs(func(a slog.Attr) bool {
		h.attrs[a.Key] = append(h.attrs[a.Key], a.Value)
		return true
	})
	return nil
}

func (h *attrHandler) values(key string) []slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.attrs[key])
}

// TestContainDeadlineRenewedWhileStarting: a lease renewed while the shim
// is being started (it was given a deadline already past) reaches it, and
// it keeps the command running: the first stop is the one asked for.
func TestContainDeadlineRenewedWhileStarting(t *testing.T) {
	mark := newMark(t)
	h := &attrHandler{}
	// The shim starts once the test opens a gate: the renewal is made
	// while it is being started, whatever the machine's speed.
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	wrapper := filepath.Join(dir, "shim")
	script := "#!/bin/sh\nwhile [ ! -e " + gate + " ]; do sleep 0.01; done\nexec " + os.Args[0] + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Path: "sh", Args: []string{"-c", "sleep 1000"}, Env: []string{markVar + "=" + mark},
		Grace: time.Second, Shim: wrapper, Logger: slog.New(h), BackoffMin: time.Hour, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDeadline(time.Now()) // over by the time the shim runs
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(t, s, ctx)
	waitFor(t, "the shim to be starting", time.Minute, func() bool { return len(marked(mark)) > 0 })
	s.SetDeadline(time.Now().Add(time.Hour))
	os.WriteFile(gate, nil, 0o644)
	waitMarked(t, mark, 2) // the command and its sleep
	cancel()
	<-done
	// A stop by the shim logs "reason", one asked for logs "by".
	if r, by := h.values("reason"), h.values("by"); len(r) > 0 || len(by) != 1 || by[0].String() != "requested" {
		t.Fatalf("stop reasons %v, by %v: want one stop, the one requested, not one at the deadline given before the renewal", r, by)
	}
}

// TestNoStartAfterDeadline: a shim that runs only after its lease is over
// (a loaded machine, a slow start) never starts the command; the start is
// reported as failed, saying why.
func TestNoStartAfterDeadline(t *testing.T) {
	mark := newMark(t)
	h := &attrHandler{}
	dir := t.TempDir()
	gate, ran := filepath.Join(dir, "gate"), filepath.Join(dir, "ran")
	wrapper := filepath.Join(dir, "shim")
	script := "#!/bin/sh\nwhile [ ! -e " + gate + " ]; do sleep 0.01; done\nexec " + os.Args[0] + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Path: "sh", Args: []string{"-c", "touch " + ran + "; sleep 1000"}, Env: []string{markVar + "=" + mark},
		Grace: time.Second, Shim: wrapper, Logger: slog.New(h), BackoffMin: time.Hour, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetDeadline(time.Now()) // over by the time the shim runs
	done := runAsync(t, s, ctx)
	waitFor(t, "the shim to be starting", time.Minute, func() bool { return len(marked(mark)) > 0 })
	os.WriteFile(gate, nil, 0o644)
	waitFor(t, "the start to be refused", time.Minute, func() bool { return len(h.values("err")) > 0 })
	if e := h.values("err")[0].String(); !strings.Contains(e, "lease ended before the command could start") {
		t.Fatalf("start error %q: want the lease's end named", e)
	}
	waitFor(t, "the shim to be gone", time.Minute, func() bool { return len(marked(mark)) == 0 })
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran after its lease had ended")
	}
	cancel()
	<-done
}
