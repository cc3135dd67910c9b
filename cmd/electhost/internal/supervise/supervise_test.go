//go:build unix

package supervise

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	RunShim(os.Args[1:]) // the test binary is the tests' shim too
	if os.Getenv("SUPERVISE_TREE_HELPER") != "" {
		treeHelperMain()
		return
	}
	if marker := os.Getenv("SUPERVISE_HELPER_MARKER"); marker != "" {
		helperMain(marker)
		return
	}
	// The spawning thread's goroutine lives as long as the process, by design.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/electcore/electcore/cmd/electhost/internal/supervise.spawnLoop"))
}

// helperMain is a supervisor process for TestParentDeath: it runs a command
// that creates marker and removes it on SIGTERM, and never returns.
func helperMain(marker string) {
	script := `trap 'rm -f "$MARKER"; exit 0' TERM
echo $$ > "$MARKER.tmp" && mv "$MARKER.tmp" "$MARKER"
while :; do sleep 0.05; done`
	s, err := New(Options{Path: "sh", Args: []string{"-c", script}, Env: []string{"MARKER=" + marker}})
	if err != nil {
		os.Exit(5)
	}
	s.Run(context.Background())
	os.Exit(6)
}

// syncBuf is a goroutine-safe buffer for a command's output.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls cond until it holds, failing the test after d. The tests
// give a minute: a give-up, not a bound (processes start and exit slowly
// on a loaded runner); what is timed is logged or has its own check.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

func runAsync(t *testing.T, s *Supervisor, ctx context.Context, env ...string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, env...) }()
	return done
}

func TestStopsOnCancelWithSIGTERM(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "running")
	var out syncBuf
	script := `trap 'rm -f "$MARKER"; echo got-term; exit 0' TERM
echo "$ELECT_TERM" > "$MARKER.tmp" && mv "$MARKER.tmp" "$MARKER"
while :; do sleep 0.05; done`
	s, err := New(Options{Path: "sh", Args: []string{"-c", script}, Env: []string{"MARKER=" + marker}, Stdout: &out, Grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(t, s, ctx, "ELECT_TERM=7")
	waitFor(t, "the command to start", time.Minute, func() bool { _, err := os.Stat(marker); return err == nil })
	if b, _ := os.ReadFile(marker); strings.TrimSpace(string(b)) != "7" {
		t.Fatalf("ELECT_TERM in the command = %q, want 7", b)
	}
	if !s.Running() {
		t.Fatal("Running() = false while running")
	}
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after cancel")
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Fatalf("stop took %v: SIGTERM was not sent at once", el)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the command did not run its SIGTERM handler: marker still there (%v)", err)
	}
	if !strings.Contains(out.String(), "got-term") {
		t.Fatalf("output %q lacks got-term", out.String())
	}
	st := s.Stats()
	if st.Starts != 1 || st.Stops != 1 || st.Kills != 0 || st.Exits != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSIGKILLAfterGrace(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// Ignores SIGTERM; writes its pid.
	script := `trap '' TERM; echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 0.05; done`
	grace := 300 * time.Millisecond
	s, err := New(Options{Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PIDFILE=" + pidFile}, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(t, s, ctx)
	waitFor(t, "pid file", time.Minute, func() bool { return readPid(t, pidFile) != 0 })
	pid := readPid(t, pidFile)
	t0 := time.Now()
	cancel()
	<-done
	el := time.Since(t0)
	if el < grace {
		t.Fatalf("returned after %v, before the grace period %v", el, grace)
	}
	if el > grace+2*time.Second {
		t.Fatalf("returned after %v, long after the grace period %v", el, grace)
	}
	if alive(pid) {
		t.Fatalf("process %d still alive after Run returned", pid)
	}
	if st := s.Stats(); st.Kills != 1 {
		t.Fatalf("stats %+v: want one SIGKILL", st)
	}
}

func TestWholeProcessGroupStopped(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	// The shell starts a background grandchild that ignores SIGTERM, then waits.
	script := `sh -c 'trap "" TERM; echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 0.05; done' &
wait`
	s, err := New(Options{Path: "sh", Args: []string{"-c", script}, Env: []string{"PIDFILE=" + pidFile}, Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(t, s, ctx)
	waitFor(t, "grandchild pid", time.Minute, func() bool { return readPid(t, pidFile) != 0 })
	gc := readPid(t, pidFile)
	cancel()
	<-done
	// The grandchild is re-parented to init (or a subreaper) once killed; give
	// it a moment to be reaped.
	waitFor(t, "grandchild to be gone", time.Minute, func() bool { return !alive(gc) || isZombie(gc) })
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestRestartsWithBackoff: a command that keeps exiting is restarted after
// a growing back-off, never in a tight loop. It waits for five starts and
// checks each gap against the back-off's least wait (a loaded machine only
// lengthens gaps); how long the waits are at most is not a test's to time.
func TestRestartsWithBackoff(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "starts")
	script := `echo start >> "$LOG"; exit 3`
	var exits []string
	var starts []time.Time
	var mu sync.Mutex
	fifth := make(chan struct{})
	s, err := New(Options{
		Path: "sh", Args: []string{"-c", script}, Env: []string{"LOG=" + log},
		BackoffMin: 40 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		OnStart: func(int) {
			mu.Lock()
			defer mu.Unlock()
			if starts = append(starts, time.Now()); len(starts) == 5 {
				close(fifth)
			}
		},
		OnExit: func(pid int, err error) {
			mu.Lock()
			defer mu.Unlock()
			exits = append(exits, exitStatus(err))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(t, s, ctx)
	select {
	case <-fifth:
	case <-time.After(time.Minute):
		t.Error("fewer than five starts in a minute")
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// Back-off ceilings 40, 80, 160, 200 ms, each wait jittered to at least
	// half of its ceiling.
	least := []time.Duration{20, 40, 80, 100}
	for i := 1; i < len(starts) && i <= len(least); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < least[i-1]*time.Millisecond {
			t.Errorf("start %d came %v after the one before, under the back-off's least wait %v", i+1, gap, least[i-1]*time.Millisecond)
		}
	}
	st := s.Stats()
	if int(st.Starts) != len(starts) || st.Exits < uint64(len(starts)-1) {
		t.Fatalf("stats %+v, %d starts seen", st, len(starts))
	}
	if len(exits) == 0 || !strings.Contains(exits[0], "exit status 3") {
		t.Fatalf("exit statuses %v", exits)
	}
	// The last start may be stopped before its shell wrote its line.
	if b, _ := os.ReadFile(log); strings.Count(string(b), "start") < len(starts)-1 {
		t.Fatalf("%d starts, the command logged %q", len(starts), b)
	}
}

func TestLeftoversKilledBeforeRestart(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	// Each run leaves a background sleeper behind and exits at once.
	script := `sleep 30 & echo $! >> "$PIDS"; exit 0`
	s, err := New(Options{Path: "sh", Args: []string{"-c", script}, Env: []string{"PIDS=" + pids}, BackoffMin: 100 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(t, s, ctx)
	waitFor(t, "two runs", time.Minute, func() bool {
		b, _ := os.ReadFile(pids)
		return strings.Count(string(b), "\n") >= 2
	})
	cancel()
	<-done
	b, _ := os.ReadFile(pids)
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		waitFor(t, "leftover "+f+" to be gone", time.Minute, func() bool { return !alive(pid) || isZombie(pid) })
	}
}

func TestMissingCommand(t *testing.T) {
	_, err := New(Options{Path: "electcore-no-such-command"})
	if !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("err = %v, want exec.ErrNotFound", err)
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("New with no command succeeded")
	}
}

func TestBusyAndCancelledBeforeStart(t *testing.T) {
	s, err := New(Options{Path: "sleep", Args: []string{"30"}, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil || s.Stats().Starts != 0 {
		t.Fatalf("Run on a cancelled ctx: %v, %+v", err, s.Stats())
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := runAsync(t, s, ctx)
	waitFor(t, "start", time.Minute, func() bool { return s.Stats().Starts == 1 })
	if err := s.Run(ctx); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Run: %v, want ErrBusy", err)
	}
	cancel()
	<-done
}

func TestParentDeathStopsCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("PR_SET_PDEATHSIG is Linux only")
	}
	marker := filepath.Join(t.TempDir(), "running")
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), "SUPERVISE_HELPER_MARKER="+marker)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the helper's command to start", time.Minute, func() bool { return readPid(t, marker) != 0 })
	child := readPid(t, marker)
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	waitFor(t, "the orphaned command to get SIGTERM and clean up", time.Minute, func() bool {
		_, err := os.Stat(marker)
		return os.IsNotExist(err)
	})
	waitFor(t, "the orphaned command to exit", time.Minute, func() bool { return !alive(child) || isZombie(child) })
}

func TestRunOnceExitCodes(t *testing.T) {
	for _, c := range []struct {
		script string
		code   int
	}{{"exit 0", 0}, {"exit 7", 7}, {"kill -KILL $$", 137}} {
		s, err := New(Options{Path: "sh", Args: []string{"-c", c.script}})
		if err != nil {
			t.Fatal(err)
		}
		code, exited, err := s.RunOnce(context.Background())
		if err != nil || !exited || code != c.code {
			t.Fatalf("%q: code %d exited %v err %v, want %d", c.script, code, exited, err, c.code)
		}
		if st := s.Stats(); st.Starts != 1 {
			t.Fatalf("%q: %d starts, want 1 (no restart)", c.script, st.Starts)
		}
	}
	s, err := New(Options{Path: "sleep", Args: []string{"10"}, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, exited, err := s.RunOnce(ctx); err != nil || exited {
		t.Fatalf("cancelled: exited %v err %v", exited, err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("stop took %v", d)
	}
}
