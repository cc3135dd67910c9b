package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/cmd/electhost/internal/supervise"
	"github.com/electcore/electcore/internal/testwasm"
	"go.uber.org/goleak"
)

// The e2e tests run real electhost processes against a real embedded NATS
// server and the pilotctl stand-in. The electhost they run is this test
// binary, which links all of package main: started through a link named
// electhost it runs main, so no second binary is built (a go build of
// electhost per test process, plain and again under -race, cost more CPU
// than most tests; under go test -race the agents are race-built as
// before). Their electcore.wasm comes from internal/testwasm
// ($ELECTCORE_WASM, which make test sets, or a fresh build).
var (
	binPath  string // electhost: a link to this test binary
	wasmPath string // electcore.wasm
	buildErr error
)

// binName is the name under which this test binary is electhost.
const binName = "electhost"

func TestMain(m *testing.M) {
	// electhost itself: an agent or CLI started through binPath, or an
	// agent's leader-only command supervisor (the agent re-executes its
	// own binary with supervise.ShimArg; its environment carries the
	// helper variables below, meant for the command it supervises).
	if filepath.Base(os.Args[0]) == binName || len(os.Args) > 1 && os.Args[1] == supervise.ShimArg {
		main()
		return
	}
	switch os.Getenv("ELECTHOST_TEST_HELPER") {
	case "leadercmd":
		os.Exit(leaderCmdMain())
	case "treecheck":
		os.Exit(treeCheckMain())
	}
	flag.Parse()
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run()) // listing tests (make fuzz): no binary needed
	}
	dir, err := os.MkdirTemp("", "electhost-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildErr = build(dir)
	code := m.Run()
	testwasm.Cleanup()
	os.RemoveAll(dir)
	// A goroutine left behind by a test (an agent not closed, a callback or
	// a transport's subscription outliving Close) fails the run.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// build makes binPath, a link named electhost to this test binary, and
// finds the module.
func build(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	binPath = filepath.Join(dir, binName)
	if err := os.Symlink(self, binPath); err != nil {
		return err
	}
	wasmPath, err = testwasm.Module("")
	return err
}

func needBinary(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// leaderCmdMain is the leader-only command of the e2e tests. It claims
// $ELECTHOST_TEST_DIR/lock.flock with flock(2), which the kernel releases
// when the process ends, however it ends: if another agent's command holds
// it, that command is alive, and this one records an overlap. Holding it,
// it writes "<term> <leader>" to $ELECTHOST_TEST_DIR/lock (what the tests
// read), and removes that file on SIGTERM ($ELECTHOST_TEST_STOP_DELAY
// later, if set). Every start and stop is appended to
// $ELECTHOST_TEST_DIR/log as "start|stop <term> <leader> <unix ns>"; a lock
// file found behind a free flock is a command killed (SIGKILL after its
// stop grace, on a loaded machine) before it could stop: it is logged as
// "killed", which ends that command as "stop" does.
func leaderCmdMain() int {
	dir := os.Getenv("ELECTHOST_TEST_DIR")
	if os.Getenv("ELECTHOST_TEST_PER_GROUP") != "" && os.Getenv("ELECT_GROUP") != "" {
		// An agent of several groups: each group's commands have their
		// own lock and log, chosen by ELECT_GROUP.
		dir = filepath.Join(dir, os.Getenv("ELECT_GROUP"))
		os.MkdirAll(dir, 0o755)
	}
	term, leader := os.Getenv("ELECT_TERM"), os.Getenv("ELECT_LEADER")
	logLine := func(what string) {
		f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s %s %s %d\n", what, term, leader, time.Now().UnixNano())
			f.Close()
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	lock := filepath.Join(dir, "lock")
	fl, err := os.OpenFile(lock+".flock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return 4
	}
	defer fl.Close() // held until the process ends
	if err := syscall.Flock(int(fl.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		held, _ := os.ReadFile(lock)
		logLine("overlap(" + strings.TrimSpace(string(held)) + ")")
		o, _ := os.OpenFile(filepath.Join(dir, "overlaps"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		fmt.Fprintf(o, "term %s leader %s found the lock held by %q\n", term, leader, held)
		o.Close()
		return 3
	}
	if held, err := os.ReadFile(lock); err == nil {
		f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "killed %s %d\n", held, time.Now().UnixNano())
			f.Close()
		}
	}
	if err := os.WriteFile(lock+".new", []byte(term+" "+leader), 0o644); err != nil || os.Rename(lock+".new", lock) != nil {
		return 4
	}
	logLine("start")
	if os.Getenv("ELECT_GROUP") == "" {
		logLine("no-ELECT_GROUP")
	}
	<-sigs
	// A command that uses its stop grace ($ELECTHOST_TEST_STOP_DELAY):
	// still acting, lock held, until it has finished.
	if d, err := time.ParseDuration(os.Getenv("ELECTHOST_TEST_STOP_DELAY")); err == nil {
		time.Sleep(d)
	}
	os.Remove(lock)
	logLine("stop")
	return 0
}

// readLines returns the lines of a file (nil if it does not exist).
func readLines(path string) []string {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// runCLI runs the binary to completion (with a deadline) and returns its exit
// code, stdout and stderr.
func runCLI(t *testing.T, timeout time.Duration, env []string, args ...string) (int, string, string) {
	t.Helper()
	needBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(append(os.Environ(), "ELECTCORE_WASM="+wasmPath), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("electhost %s: still running after %v (hang)\nstderr: %s", strings.Join(args, " "), timeout, stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("electhost %s: %v", strings.Join(args, " "), err)
	}
	return code, stdout.String(), stderr.String()
}

func parseNs(s string) time.Time {
	var ns int64
	fmt.Sscan(s, &ns)
	return time.Unix(0, ns)
}
