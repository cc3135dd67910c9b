// Package supervise runs a command only while a context lives: the
// leader-only command of `electhost run ... -- CMD ARGS`.
//
// With Options.Shim (Unix), every start goes through a small supervising
// process, the shim: the caller's own binary re-executed with ShimArg (its
// main calls RunShim first). The shim starts the command in a session of its
// own and contains it: in a cgroup of its own where cgroup v2 is writable
// (stopped with cgroup.kill, like systemd's KillMode=control-group), else as
// a child subreaper (PR_SET_CHILD_SUBREAPER: orphans, double-forked and
// setsid'd ones included, are re-parented to it, so it finds and kills them),
// else (outside Linux) as a process group. It stops the whole tree when the
// caller asks, when the deadline set with SetDeadline passes (without the
// caller being scheduled), and when the caller dies (its control pipe reads
// EOF; on Linux PR_SET_PDEATHSIG too).
//
// Without a shim the command runs directly, in its own process group, with
// PR_SET_PDEATHSIG on Linux: only the command itself hears of the caller's
// death, and nothing finds descendants that leave the group.
//
// When the context is cancelled (leadership or its lease is lost) every
// process of the command gets SIGTERM at once and SIGKILL after the grace
// period; Run returns only once they are gone, so a caller can tell "nothing
// runs any more". If the command exits while the context still lives it is
// restarted with jittered exponential back-off.
package supervise

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
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
	// Shim is the executable that runs the supervising process when given
	// ShimArg as its first argument (its main calls RunShim). "" runs the
	// command directly (no containment beyond its process group).
	Shim string
	// Contain is the containment the shim must use (default ContainAuto:
	// the best available). Ignored without a shim.
	Contain Containment
}

// ShimArg is the first argument that makes a program whose main calls
// RunShim run as the supervising process.
const ShimArg = "__electcore-supervise"

// Containment is how the command's processes are found and stopped.
type Containment string

const (
	ContainAuto Containment = "auto" // the best of the three below
	// ContainCgroup: a cgroup v2 of its own, stopped with cgroup.kill.
	ContainCgroup Containment = "cgroup"
	// ContainSubreaper: the shim reaps every orphan below it and kills its
	// descendants, found in the process table.
	ContainSubreaper Containment = "subreaper"
	// ContainProcessGroup: the command's process group only.
	ContainProcessGroup Containment = "process-group"
	// ContainNone: no shim (the command is the supervisor's own child).
	ContainNone Containment = "none"
)

// ParseContainment checks a containment name.
func ParseContainment(s string) (Containment, error) {
	switch c := Containment(s); c {
	case ContainAuto, ContainCgroup, ContainSubreaper, ContainProcessGroup:
		return c, nil
	}
	return "", fmt.Errorf("containment %q: want auto, cgroup, subreaper or process-group", s)
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

	mu          sync.Mutex
	cur         *proc     // the process running now (nil: none)
	deadline    time.Time // see SetDeadline
	contain     Containment
	containNote string

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
	s := &Supervisor{opts: opts, path: path, logger: logger, contain: ContainNone}
	if opts.Shim != "" {
		if opts.Contain == "" {
			opts.Contain = ContainAuto
		}
		if _, err := ParseContainment(string(opts.Contain)); err != nil {
			return nil, fmt.Errorf("supervise: %w", err)
		}
		c, note, err := probe(opts.Contain)
		if err != nil {
			return nil, fmt.Errorf("supervise: %w", err)
		}
		s.opts.Contain, s.contain, s.containNote = opts.Contain, c, note
	}
	return s, nil
}

// Containment reports the containment in force: what the last shim
// reported, or before any start what it would use; and a detail (the
// cgroup, or why a better containment is unavailable).
func (s *Supervisor) Containment() (Containment, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contain, s.containNote
}

// SetDeadline gives the time by which the command must be stopped (the end
// of the leader's lease); the zero time means none. With a shim, the shim
// holds it and stops the command then (SIGTERM, SIGKILL the grace period
// later) by itself, so the stop does not wait for this process to be
// scheduled; it applies to the running command and to later starts. A later
// call moves it (a renewed lease).
func (s *Supervisor) SetDeadline(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.Equal(s.deadline) {
		return
	}
	s.deadline = t
	if s.cur != nil && s.cur.ctl != nil {
		fmt.Fprintf(s.cur.ctl, "d %d\n", monoAt(t))
	}
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
				pid := s.exited(p, werr)
				if time.Since(started) >= s.opts.StableAfter {
					bo.Reset()
				}
				wait = bo.Next()
				if by := p.stoppedBy(); by != "" {
					s.logger.Warn("leader-only command stopped by its supervising process", append(p.stopAttrs(), "pid", pid, "reason", by, "status", exitStatus(werr), "retry_in", wait)...)
				} else {
					s.logger.Warn("leader-only command exited while leading; restarting", "pid", pid, "status", exitStatus(werr), "after", time.Since(started).Round(time.Millisecond), "retry_in", wait)
				}
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
// does (exited false, with the code it ended with once stopped; likewise
// when the shim stopped it at the deadline). Leftovers of its process group
// are killed either way.
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
		return exitCode(s.stop(p)), false, nil
	case werr := <-p.done:
		pid := s.exited(p, werr)
		if by := p.stoppedBy(); by != "" {
			// Stopped, at the lease deadline for instance: not a run to
			// completion.
			s.logger.Warn("leader-only command stopped by its supervising process", append(p.stopAttrs(), "pid", pid, "reason", by, "status", exitStatus(werr))...)
			return exitCode(werr), false, nil
		}
		s.logger.Info("leader-only command exited", "pid", pid, "status", exitStatus(werr))
		return exitCode(werr), true, nil
	}
}

// exited accounts for a command that ended without a stop from here, and
// returns its pid. Leftovers of its group (background children) must not
// outlive the run they belong to: the shim killed them already; without
// one, its process group is killed here.
func (s *Supervisor) exited(p *proc, werr error) int {
	s.exits.Add(1)
	pid := p.pid
	if p.ctl != nil {
		s.finished(p)
		p.report.mu.Lock()
		pid = p.report.cmdPid
		if p.report.killed {
			s.kills.Add(1)
		}
		p.report.mu.Unlock()
	} else {
		killGroup(p.pid, true)
	}
	if s.opts.OnExit != nil {
		s.opts.OnExit(pid, werr)
	}
	return pid
}

// exitCode is the shell's view of a Wait error: the exit status, or 128+N
// for a process killed by signal N.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ce cmdExit
	if errors.As(err, &ce) {
		return ce.code
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
	pid  int // the process started: the shim, or the command itself
	cmd  *exec.Cmd
	done chan error

	// With a shim: the control pipe and what the shim reported.
	ctl    *os.File
	report shimReport
}

// shimReport is what a shim said on its report pipe.
type shimReport struct {
	mu       sync.Mutex
	contain  string // "KIND [DETAIL]"
	sched    string // the shim's scheduling: fifo, nice or none
	cmdPid   int
	startErr string
	stopped  string // why it stopped the command ("" if it exited by itself)
	killed   bool   // the stop needed SIGKILL
	tookMs   int64
	// The shim's lateness (µs): SIGTERM after the lease deadline that
	// caused it, SIGKILL after its due time.
	termLateUs, killLateUs int64
	code                   int
	haveCode               bool
	ready                  chan struct{} // closed at "started" or "start-error"
}

func (r *shimReport) read(rd io.Reader) {
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		r.mu.Lock()
		switch kind {
		case "contain":
			r.contain = rest
		case "sched":
			r.sched = rest
		case "started":
			r.cmdPid, _ = strconv.Atoi(rest)
			r.setReady()
		case "start-error":
			r.startErr = rest
			r.setReady()
		case "stopped":
			f := strings.Fields(rest)
			if len(f) == 5 {
				r.stopped = f[0]
				r.killed = f[1] == "true"
				r.tookMs, _ = strconv.ParseInt(f[2], 10, 64)
				r.termLateUs, _ = strconv.ParseInt(f[3], 10, 64)
				r.killLateUs, _ = strconv.ParseInt(f[4], 10, 64)
			}
		case "exit":
			r.code, _ = strconv.Atoi(rest)
			r.haveCode = true
		}
		r.mu.Unlock()
	}
}

func (r *shimReport) setReady() {
	select {
	case <-r.ready:
	default:
		close(r.ready)
	}
}

// cmdExit is the command's exit as its shim reported it.
type cmdExit struct{ code int }

func (e cmdExit) Error() string {
	if e.code > 128 && e.code < 128+65 {
		return "signal: " + syscall.Signal(e.code-128).String()
	}
	return "exit status " + strconv.Itoa(e.code)
}

func (s *Supervisor) start(env []string) (*proc, error) {
	if s.opts.Shim != "" {
		return s.startShim(env)
	}
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

// startShim starts the command under a shim and waits for it to say how it
// started.
func (s *Supervisor) startShim(env []string) (*proc, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	s.mu.Lock()
	deadline := monoAt(s.deadline)
	s.mu.Unlock()
	args := []string{ShimArg, "-grace", s.opts.Grace.String(), "-contain", string(s.opts.Contain),
		"-deadline", strconv.FormatInt(deadline, 10), "--", s.path, s.opts.Path}
	cmd := exec.Command(s.opts.Shim, append(args, s.opts.Args...)...)
	cmd.Dir = s.opts.Dir
	cmd.Env = append(append(os.Environ(), s.opts.Env...), env...)
	cmd.Stdout = s.opts.Stdout
	cmd.Stderr = s.opts.Stderr
	cmd.WaitDelay = time.Second
	cmd.ExtraFiles = []*os.File{ctlR, repW} // fds 3 and 4
	cmd.SysProcAttr = shimProcAttr()
	err = onSpawnThread(cmd.Start)
	ctlR.Close()
	repW.Close()
	if err != nil {
		ctlW.Close()
		repR.Close()
		return nil, err
	}
	p := &proc{pid: cmd.Process.Pid, cmd: cmd, done: make(chan error, 1), ctl: ctlW}
	p.report.ready = make(chan struct{})
	// From now on SetDeadline reaches this shim; a renewal made while it
	// was being started goes now (the shim reads it once it runs).
	s.mu.Lock()
	s.cur = p
	if d := monoAt(s.deadline); d != deadline {
		fmt.Fprintf(ctlW, "d %d\n", d)
	}
	s.mu.Unlock()
	reported := make(chan struct{})
	go func() {
		p.report.read(repR)
		repR.Close()
		close(reported)
	}()
	go func() {
		werr := cmd.Wait()
		<-reported
		ctlW.Close()
		r := &p.report
		r.mu.Lock()
		if r.haveCode {
			werr = nil
			if r.code != 0 {
				werr = cmdExit{r.code}
			}
		}
		r.mu.Unlock()
		p.done <- werr
	}()
	// The shim reports its containment and the command's pid, or why it
	// could not start it, before anything else.
	select {
	case <-p.report.ready:
	case <-reported:
	}
	p.report.mu.Lock()
	cmdPid, contain, startErr := p.report.cmdPid, p.report.contain, p.report.startErr
	p.report.mu.Unlock()
	if cmdPid == 0 && startErr == "" {
		startErr = "the supervising process exited without starting the command"
	}
	if startErr != "" {
		<-p.done
		s.finished(p)
		return nil, errors.New(startErr)
	}
	kind, detail, _ := strings.Cut(contain, " ")
	s.mu.Lock()
	s.contain, s.containNote = Containment(kind), detail
	s.mu.Unlock()
	s.starts.Add(1)
	p.report.mu.Lock()
	sched := p.report.sched
	p.report.mu.Unlock()
	s.logger.Info("leader-only command started", "cmd", s.path, "pid", cmdPid, "containment", kind, "detail", detail, "supervisor_sched", sched)
	if s.opts.OnStart != nil {
		s.opts.OnStart(cmdPid)
	}
	return p, nil
}

// finished is called once p has exited: it is no longer the current one.
func (s *Supervisor) finished(p *proc) {
	s.mu.Lock()
	if s.cur == p {
		s.cur = nil
	}
	s.mu.Unlock()
}

// stopped reports whether the shim stopped the command (rather than it
// exiting by itself), and why.
func (p *proc) stoppedBy() string {
	p.report.mu.Lock()
	defer p.report.mu.Unlock()
	return p.report.stopped
}

// stop sends SIGTERM to every process of the command, SIGKILL after the
// grace period, and returns once they are gone (or have been sent SIGKILL),
// with the command's exit.
func (s *Supervisor) stop(p *proc) error {
	s.stops.Add(1)
	t0 := time.Now()
	if p.ctl != nil {
		return s.stopShim(p, t0)
	}
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
	return werr
}

// stopShim asks the shim to stop the command; the shim holds the grace
// period. If the shim itself does not end well after it, it is killed and
// the command's cgroup or group with it.
func (s *Supervisor) stopShim(p *proc, t0 time.Time) error {
	fmt.Fprintln(p.ctl, "s")
	backstop := time.NewTimer(s.opts.Grace + shimBackstop)
	defer backstop.Stop()
	var werr error
	select {
	case werr = <-p.done:
	case <-backstop.C:
		s.logger.Error("the leader-only command's supervising process did not stop it in time; killing it", "pid", p.pid)
		p.cmd.Process.Kill()
		p.killTree()
		werr = <-p.done
	}
	s.finished(p)
	r := &p.report
	r.mu.Lock()
	killed, reason, cmdPid := r.killed, r.stopped, r.cmdPid
	r.mu.Unlock()
	if killed {
		s.kills.Add(1)
	}
	if s.opts.OnExit != nil {
		s.opts.OnExit(cmdPid, werr)
	}
	s.logger.Info("leader-only command stopped", append(p.stopAttrs(), "pid", cmdPid, "status", exitStatus(werr), "took", time.Since(t0).Round(time.Millisecond), "by", reason)...)
	return werr
}

// stopAttrs are the shim's figures of its stop: whether SIGKILL was
// needed, and how late the shim sent SIGTERM (after the lease deadline) and
// SIGKILL (after its due time), its own scheduling delay.
func (p *proc) stopAttrs() []any {
	p.report.mu.Lock()
	defer p.report.mu.Unlock()
	a := []any{"sigkill", p.report.killed}
	if p.report.stopped == "lease-deadline" {
		a = append(a, "sigterm_late", time.Duration(p.report.termLateUs)*time.Microsecond)
	}
	if p.report.killed {
		a = append(a, "sigkill_late", time.Duration(p.report.killLateUs)*time.Microsecond)
	}
	return a
}

// shimBackstop is how long after the grace period a shim that has not
// exited is killed from here.
const shimBackstop = 2 * time.Second

// killTree kills what a killed shim may have left: its cgroup, or the
// command's process group.
func (p *proc) killTree() {
	p.report.mu.Lock()
	contain, pid := p.report.contain, p.report.cmdPid
	p.report.mu.Unlock()
	if kind, dir, _ := strings.Cut(contain, " "); kind == string(ContainCgroup) && dir != "" {
		if cg, _, _ := strings.Cut(dir, " "); cg != "" {
			os.WriteFile(cg+"/cgroup.kill", []byte("1"), 0)
		}
	}
	if pid > 0 {
		killGroup(pid, true)
	}
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
