// Package supervise runs a command only while a context lives: the
// leader-only command of `electhost run ... -- CMD ARGS`.
//
// The command runs in its own process group. When the context is cancelled
// (leadership or its lease is lost) the whole group gets SIGTERM at once and
// SIGKILL after the grace period; Run returns only once the command has exited
// and its group has been killed, so a caller can tell "nothing runs any more".
// If the command exits while the context still lives it is restarted with
// jittered exponential back-off. On Linux the command also gets SIGTERM from
// the kernel if the supervising process dies (PR_SET_PDEATHSIG), so a crashed
// supervisor does not leave a leader-only command running.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/electcore/electcore/internal/backoff"
)

// Options configures a Supervisor.
type Options struct {
	// Path is the executable: a path, or a name looked up in PATH. Required.
	Path string
	// Args are the command's arguments (without argv[0]).
	Args []string
	// Env is appended to the supervisor's environment for every start.
	Env []string
	// Dir is the working directory ("" for the current one).
	Dir string
	// Stdout and Stderr receive the command's output (nil: discarded).
	// Passing *os.File values avoids a copying goroutine.
	Stdout, Stderr io.Writer
	// Grace is the time between SIGTERM and SIGKILL. Default 1 s.
	Grace time.Duration
	// BackoffMin/BackoffMax bound the delay before restarting a command that
	// exited by itself. Defaults 100 ms and 10 s.
	BackoffMin, BackoffMax time.Duration
	// StableAfter: a run at least this long resets the back-off. Default 10 s.
	StableAfter time.Duration
	// Logger receives start/exit/stop records (nil: discard).
	Logger *slog.Logger
	// OnStart and OnExit, if set, are called after each start and exit (from
	// Run's goroutine).
	OnStart func(pid int)
	OnExit  func(pid int, err error)
}

// Stats counts what a Supervisor did.
type Stats struct {
	Starts      uint64 // successful starts
	StartErrors uint64 // starts that failed (exec error)
	Exits       uint64 // the command exited on its own (it was restarted)
	Stops       uint64 // stops on cancellation (SIGTERM sent)
	Kills       uint64 // stops that needed SIGKILL after the grace period
}

// Supervisor runs one command under Run calls (one at a time).
type Supervisor struct {
	opts    Options
	path    string
	logger  *slog.Logger
	running atomic.Int32

	starts, startErrors, exits, stops, kills atomic.Uint64
}

// ErrBusy is returned by Run while another Run of the same Supervisor is active.
var ErrBusy = errors.New("supervise: already running")

// New checks the options and resolves the executable. A missing executable
// is an error matching exec.ErrNotFound.
func New(opts Options) (*Supervisor, error) {
	if opts.Path == "" {
		return nil, errors.New("supervise: no command")
	}
	path, err := exec.LookPath(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("supervise: command %q: %w", opts.Path, err)
	}
	if opts.Grace <= 0 {
		opts.Grace = time.Second
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = 100 * time.Millisecond
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(10*time.Second, opts.BackoffMin)
	}
	if opts.StableAfter <= 0 {
		opts.StableAfter = 10 * time.Second
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Supervisor{opts: opts, path: path, logger: logger}, nil
}

// Path returns the resolved executable.
func (s *Supervisor) Path() string { return s.path }

// Stats returns a snapshot of the counters.
func (s *Supervisor) Stats() Stats {
	return Stats{
		Starts:      s.starts.Load(),
		StartErrors: s.startErrors.Load(),
		Exits:       s.exits.Load(),
		Stops:       s.stops.Load(),
		Kills:       s.kills.Load(),
	}
}

// Running reports whether a Run call is active (the command may be between restarts).
func (s *Supervisor) Running() bool { return s.running.Load() != 0 }

// Run starts the command with env appended to Options.Env and keeps it
// running until ctx is cancelled; then it sends SIGTERM to the command's
// process group at once, SIGKILL after the grace period, and returns once the
// command has exited. It returns nil after a cancellation, ErrBusy if another
// Run is active.
func (s *Supervisor) Run(ctx context.Context, env ...string) error {
	if !s.running.CompareAndSwap(0, 1) {
		return ErrBusy
	}
	defer s.running.Store(0)
	bo := backoff.New(s.opts.BackoffMin, s.opts.BackoffMax)
	for {
		if ctx.Err() != nil {
			return nil
		}
		started := time.Now()
		var wait time.Duration
		p, err := s.start(env)
		if err != nil {
			s.startErrors.Add(1)
			wait = bo.Next()
			s.logger.Error("leader-only command failed to start", "cmd", s.path, "err", err, "retry_in", wait)
		} else {
			select {
			case <-ctx.Done():
				s.stop(p)
				return nil
			case werr := <-p.done:
				s.exits.Add(1)
				// Leftovers of the group (background children) must not outlive
				// the run they belong to.
				killGroup(p.pid, true)
				if s.opts.OnExit != nil {
					s.opts.OnExit(p.pid, werr)
				}
				if time.Since(started) >= s.opts.StableAfter {
					bo.Reset()
				}
				wait = bo.Next()
				s.logger.Warn("leader-only command exited while leading; restarting", "pid", p.pid, "status", exitStatus(werr), "after", time.Since(started).Round(time.Millisecond), "retry_in", wait)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// RunOnce starts the command once with env appended to Options.Env and
// waits for it to exit (exited true, with its exit code: 128+N when killed by
// signal N, as a shell reports it) or for ctx to end, which stops it as Run
// does (exited false). Leftovers of its process group are killed either way.
func (s *Supervisor) RunOnce(ctx context.Context, env ...string) (code int, exited bool, err error) {
	if !s.running.CompareAndSwap(0, 1) {
		return 0, false, ErrBusy
	}
	defer s.running.Store(0)
	p, err := s.start(env)
	if err != nil {
		s.startErrors.Add(1)
		return 0, false, err
	}
	select {
	case <-ctx.Done():
		s.stop(p)
		return 0, false, nil
	case werr := <-p.done:
		s.exits.Add(1)
		killGroup(p.pid, true)
		if s.opts.OnExit != nil {
			s.opts.OnExit(p.pid, werr)
		}
		s.logger.Info("leader-only command exited", "pid", p.pid, "status", exitStatus(werr))
		return exitCode(werr), true, nil
	}
}

// exitCode is the shell's view of a Wait error: the exit status, or 128+N
// for a process killed by signal N.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if c := ee.ExitCode(); c >= 0 {
			return c
		}
		if ws, ok := ee.Sys().(interface{ Signal() syscall.Signal }); ok {
			return 128 + int(ws.Signal())
		}
	}
	return 1
}

type proc struct {
	pid  int
	cmd  *exec.Cmd
	done chan error
}

func (s *Supervisor) start(env []string) (*proc, error) {
	cmd := exec.Command(s.path, s.opts.Args...)
	cmd.Dir = s.opts.Dir
	cmd.Env = append(append(os.Environ(), s.opts.Env...), env...)
	cmd.Stdout = s.opts.Stdout
	cmd.Stderr = s.opts.Stderr
	// If Stdout/Stderr are not files, Wait would wait for every holder of the
	// pipes (background grandchildren): bound that.
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.starts.Add(1)
	p := &proc{pid: cmd.Process.Pid, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	s.logger.Info("leader-only command started", "cmd", s.path, "pid", p.pid)
	if s.opts.OnStart != nil {
		s.opts.OnStart(p.pid)
	}
	return p, nil
}

// stop sends SIGTERM to the group, SIGKILL after the grace period, and
// returns once the command has exited and its group is gone (or has been
// sent SIGKILL).
func (s *Supervisor) stop(p *proc) {
	s.stops.Add(1)
	t0 := time.Now()
	signalGroup(p.pid, p.cmd.Process, false)
	deadline := time.NewTimer(s.opts.Grace)
	defer deadline.Stop()
	var werr error
	killed := false
	select {
	case werr = <-p.done:
	case <-deadline.C:
		killed = true
		s.kills.Add(1)
		signalGroup(p.pid, p.cmd.Process, true)
		werr = <-p.done
	}
	// The direct child is gone; give the rest of its group what remains of
	// the grace period, then kill whatever is left.
	if !killed {
		for groupAlive(p.pid) {
			select {
			case <-deadline.C:
				killed = true
				s.kills.Add(1)
			case <-time.After(5 * time.Millisecond):
				continue
			}
			break
		}
	}
	killGroup(p.pid, true)
	if s.opts.OnExit != nil {
		s.opts.OnExit(p.pid, werr)
	}
	s.logger.Info("leader-only command stopped", "pid", p.pid, "status", exitStatus(werr), "took", time.Since(t0).Round(time.Millisecond), "sigkill", killed)
}

func exitStatus(err error) string {
	if err == nil {
		return "exit 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return err.Error()
}
