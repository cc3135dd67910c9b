//go:build unix

package supervise

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The shim is the small supervising process between the agent and its
// command: the agent starts it (re-executing its own binary with ShimArg),
// and it starts the command in a session of its own, contained (a cgroup, or
// as the reaper of every orphan below it), and stops the whole tree when
//
//   - the agent asks (a line "s" on the control pipe),
//   - the lease deadline it was given passes (a line "d NS" moves it), so
//     the stop does not wait for the agent to be scheduled,
//   - the agent dies: the control pipe reads EOF (and on Linux the kernel
//     sends SIGTERM: PR_SET_PDEATHSIG).
//
// It reports on the report pipe: "contain KIND [DETAIL]", "sched CLASS"
// (fifo, nice or none: see raisePriority), "started PID",
// "stopped REASON SIGKILL TOOK_MS", and last "exit CODE".
const (
	shimCtlFD    = 3 // control pipe, read end (from the agent)
	shimReportFD = 4 // report pipe, write end (to the agent)
)

// monoNow is CLOCK_MONOTONIC in nanoseconds: one clock for the agent and
// the shim (Go's monotonic readings cannot cross a process boundary).
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// monoAt converts t to CLOCK_MONOTONIC nanoseconds (0 for the zero time).
func monoAt(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return monoNow() + int64(time.Until(t))
}

// RunShim runs the supervising process if args (os.Args[1:]) start with
// ShimArg, and then exits; otherwise it returns at once. Call it first
// thing in main of the program given as Options.Shim.
func RunShim(args []string) {
	if len(args) == 0 || args[0] != ShimArg {
		return
	}
	os.Exit(shimMain(args[1:]))
}

type shimFlags struct {
	grace    time.Duration
	contain  string
	deadline int64
	path     string
	argv     []string
}

func parseShim(args []string) (shimFlags, error) {
	var f shimFlags
	fs := flag.NewFlagSet(ShimArg, flag.ContinueOnError)
	fs.DurationVar(&f.grace, "grace", time.Second, "")
	fs.StringVar(&f.contain, "contain", string(ContainAuto), "")
	fs.Int64Var(&f.deadline, "deadline", 0, "")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	rest := fs.Args()
	if len(rest) < 2 {
		return f, errors.New("want: [flags] -- PATH ARGV0 [ARGS...]")
	}
	f.path, f.argv = rest[0], rest[1:]
	return f, nil
}

func shimMain(args []string) int {
	// The command is forked from this thread, and Linux's PDEATHSIG fires
	// when the forking *thread* ends: keep it for the life of the process.
	runtime.LockOSThread()
	// Both pipes stay with the shim: a command holding the report pipe
	// would keep the agent waiting for its end after the shim exited.
	syscall.CloseOnExec(shimCtlFD)
	syscall.CloseOnExec(shimReportFD)
	rep := os.NewFile(shimReportFD, "report")
	report := func(format string, a ...any) { fmt.Fprintf(rep, format+"\n", a...) }
	f, err := parseShim(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "electcore supervisor: %v\n", err)
		return 125
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGCHLD)
	// The control pipe is read without blocking, by the loop itself: when
	// it decides that the lease is over it has read every renewal written
	// so far (a reading goroutine could hold one back, unscheduled).
	if err := syscall.SetNonblock(shimCtlFD, true); err != nil {
		fmt.Fprintf(os.Stderr, "electcore supervisor: %v\n", err)
		return 125
	}
	ctl := &control{fd: shimCtlFD}

	c, note := newContainer(Containment(f.contain))
	if c == nil {
		report("start-error %s", note)
		return 125
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		report("start-error %v", err)
		return 125
	}
	attr := &syscall.SysProcAttr{Setsid: true}
	setPdeathsig(attr, syscall.SIGKILL)
	c.prepare(attr)
	// Never start the command after its lease, nor once a stop was asked
	// for: on a loaded machine this process can start long after the agent
	// decided to run the command (seen: 314 ms after its leadership ended,
	// while the next leader led). Renewals written meanwhile count.
	deadline, why := f.deadline, ""
	for _, line := range ctl.lines() {
		if d, ok := strings.CutPrefix(line, "d "); ok {
			deadline, _ = strconv.ParseInt(d, 10, 64)
		} else if line == "s" || line == "eof" {
			why = "stopped before the command started"
		}
	}
	if why == "" && deadline != 0 && monoNow() >= deadline {
		why = "the lease ended before the command could start"
	}
	if why != "" {
		devnull.Close()
		c.close()
		report("start-error %s", why)
		return 125
	}
	p, err := os.StartProcess(f.path, f.argv, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{devnull, os.Stdout, os.Stderr}, Sys: attr})
	if err != nil && c.fallback(attr) {
		p, err = os.StartProcess(f.path, f.argv, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{devnull, os.Stdout, os.Stderr}, Sys: attr})
	}
	devnull.Close()
	if err != nil {
		c.close()
		report("start-error %v", err)
		return 127
	}
	c.started(p.Pid)
	s := &shim{c: c, pid: p.Pid, grace: f.grace}
	report("contain %s", strings.TrimSpace(string(c.kind())+" "+c.detail()+" "+note))
	report("sched %s", raisePriority())
	report("started %d", s.pid)
	code := s.loop(deadline, ctl, sigs)
	if s.stopReason != "" {
		report("stopped %s %t %d %d %d", s.stopReason, s.killed, time.Since(s.stopAt).Milliseconds(), s.termLate, s.killLate)
	}
	c.close()
	report("exit %d", code)
	return code
}

// container is how the shim finds and stops every process of the command.
type container interface {
	kind() Containment
	detail() string
	prepare(*syscall.SysProcAttr) // before the start
	fallback(*syscall.SysProcAttr) bool
	started(pid int)
	signal(syscall.Signal) // to every process of the command
	kill()                 // SIGKILL to every process of the command
	empty() bool           // no process of the command is left
	close()
}

// control reads the agent's lines from the control pipe without blocking.
type control struct {
	fd      int
	partial []byte
	eof     bool
}

// lines returns the complete lines written since the last call, and "eof"
// once the agent is gone (every write end closed).
func (c *control) lines() []string {
	if c.eof {
		return nil
	}
	var out []string
	buf := make([]byte, 512)
	for {
		n, err := syscall.Read(c.fd, buf)
		if n > 0 {
			c.partial = append(c.partial, buf[:n]...)
			continue
		}
		if err == syscall.EINTR {
			continue
		}
		if n == 0 && err == nil {
			c.eof = true
		}
		break // EAGAIN: nothing more for now
	}
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		out = append(out, string(c.partial[:i]))
		c.partial = c.partial[i+1:]
	}
	if c.eof {
		out = append(out, "eof")
	}
	return out
}

// ctlPoll is how often the shim reads its control pipe (a few microseconds
// of work each time). The lease deadline has its own timer; this bounds
// only how soon a stop asked by the agent, or its death on a system
// without PR_SET_PDEATHSIG, is seen.
const ctlPoll = 10 * time.Millisecond

type shim struct {
	c     container
	pid   int
	grace time.Duration

	exited     bool // the command itself was reaped
	code       int
	stopReason string    // why the stop began ("" while none)
	stopAt     time.Time // when it began
	killing    bool      // SIGKILL to whatever is left, until nothing is
	killed     bool      // the stop's grace ran out: SIGKILL was needed
	// How late (µs) SIGTERM went out after the lease deadline that caused
	// it, and SIGKILL after its due time: the shim's own scheduling delay.
	termLate, killLate int64
}

func (s *shim) loop(deadline int64, ctl *control, sigs <-chan os.Signal) int {
	lease := newMonoTimer(deadline)
	var killC <-chan time.Time
	var killDue int64
	poll := time.NewTicker(ctlPoll)
	defer poll.Stop()
	// stop begins the stop: SIGTERM to every process now, SIGKILL at
	// anchor+grace. The anchor is the lease deadline when that is what
	// ended it, so a late wake-up eats into the grace, not past the lease.
	stop := func(reason string, anchor int64) {
		if s.stopReason != "" {
			return
		}
		s.stopReason, s.stopAt = reason, time.Now()
		s.c.signal(syscall.SIGTERM)
		now := monoNow()
		if reason == "lease-deadline" {
			s.termLate = (now - anchor) / 1e3
		}
		killDue = anchor + int64(s.grace)
		killC = time.NewTimer(max(time.Duration(killDue-now), 0)).C
	}
	for {
		// Everything the agent wrote so far, before any decision.
		for _, line := range ctl.lines() {
			switch d, ok := strings.CutPrefix(line, "d "); {
			case ok:
				if s.stopReason == "" {
					at, _ := strconv.ParseInt(d, 10, 64)
					lease.reset(at)
				}
			case line == "s":
				stop("requested", monoNow())
			case line == "eof":
				stop("agent-gone", monoNow())
			}
		}
		if lease.at != 0 && monoNow() >= lease.at {
			stop("lease-deadline", lease.at)
		}
		exited, none := s.reap()
		if exited && s.stopReason == "" && !s.killing {
			// The command ended by itself: its leftovers must not outlive it.
			s.killing = true
		}
		if s.killing {
			s.c.kill()
			exited, none = s.reap()
		}
		if exited && none && s.c.empty() {
			return s.code
		}
		select {
		case <-lease.c():
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				stop("signal-"+unix.SignalName(sig.(syscall.Signal)), monoNow())
			}
		case <-killC:
			killC = nil
			if !s.killing {
				s.killing, s.killed = true, true
				s.c.kill()
				s.killLate = (monoNow() - killDue) / 1e3
			}
		case <-poll.C:
		}
	}
}

// reap collects every exited child (the command, and orphans handed to this
// process as their reaper). It reports whether the command has exited and
// whether no child is left.
func (s *shim) reap() (exited, none bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return s.exited, errors.Is(err, syscall.ECHILD)
		}
		if pid == s.pid {
			s.exited = true
			switch {
			case ws.Exited():
				s.code = ws.ExitStatus()
			case ws.Signaled():
				s.code = 128 + int(ws.Signal())
			default:
				s.code = 1
			}
		}
	}
}

// monoTimer fires at a CLOCK_MONOTONIC instant (never if 0).
type monoTimer struct {
	at int64
	t  *time.Timer
}

func newMonoTimer(at int64) *monoTimer {
	m := &monoTimer{}
	m.reset(at)
	return m
}

func (m *monoTimer) reset(at int64) {
	if m.t != nil {
		m.t.Stop()
		m.t = nil
	}
	m.at = at
	if at != 0 {
		m.t = time.NewTimer(max(time.Duration(at-monoNow()), 0))
	}
}

func (m *monoTimer) c() <-chan time.Time {
	if m.t == nil {
		return nil
	}
	return m.t.C
}
