//go:build linux

package supervise

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"unsafe"

	"golang.org/x/sys/unix"
)

func setPdeathsig(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }

// linuxContainer: the shim is a child subreaper (PR_SET_CHILD_SUBREAPER),
// so every orphan below it, double-forked and setsid'd ones included, is
// re-parented to it and stays findable as its descendant; with a writable
// cgroup v2 the command also runs in a cgroup of its own, stopped with
// cgroup.kill (the kernel kills every member, forks in flight included).
type linuxContainer struct {
	k     Containment
	pid   int // the command's (its session and process group)
	cg    string
	cgDir *os.File
	want  Containment
}

func newContainer(want Containment) (container, string) {
	c := &linuxContainer{k: ContainProcessGroup, want: want}
	if want == ContainProcessGroup {
		return c, ""
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		if want != ContainAuto {
			return nil, fmt.Sprintf("containment %s: PR_SET_CHILD_SUBREAPER: %v", want, err)
		}
		return c, "(no subreaper: " + err.Error() + ")"
	}
	c.k = ContainSubreaper
	if want == ContainSubreaper {
		return c, ""
	}
	dir, err := newCgroup(fmt.Sprintf("electcore-cmd-%d", os.Getpid()))
	if err != nil {
		if want == ContainCgroup {
			return nil, "containment cgroup: " + err.Error()
		}
		return c, "(no cgroup: " + err.Error() + ")"
	}
	fd, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		if want == ContainCgroup {
			return nil, "containment cgroup: " + err.Error()
		}
		return c, "(no cgroup: " + err.Error() + ")"
	}
	c.k, c.cg, c.cgDir = ContainCgroup, dir, fd
	return c, ""
}

func (c *linuxContainer) kind() Containment { return c.k }
func (c *linuxContainer) detail() string    { return c.cg }

func (c *linuxContainer) prepare(a *syscall.SysProcAttr) {
	if c.cgDir != nil {
		a.UseCgroupFD, a.CgroupFD = true, int(c.cgDir.Fd())
	}
}

// fallback drops the cgroup after a start that failed with it (a kernel
// without clone3 into a cgroup), when the caller did not insist on one.
func (c *linuxContainer) fallback(a *syscall.SysProcAttr) bool {
	if c.cgDir == nil || c.want == ContainCgroup {
		return false
	}
	a.UseCgroupFD = false
	c.dropCgroup()
	c.k = ContainSubreaper
	return true
}

func (c *linuxContainer) started(pid int) { c.pid = pid }

func (c *linuxContainer) signal(sig syscall.Signal) {
	switch c.k {
	case ContainCgroup:
		for _, pid := range c.cgroupPids() {
			syscall.Kill(pid, sig)
		}
	case ContainSubreaper:
		for _, pid := range descendants(os.Getpid()) {
			syscall.Kill(pid, sig)
		}
	}
	// The command's own group too: in process-group mode it is all there is.
	syscall.Kill(-c.pid, sig)
}

func (c *linuxContainer) kill() {
	if c.k == ContainCgroup {
		if err := os.WriteFile(filepath.Join(c.cg, "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	c.signal(syscall.SIGKILL)
}

func (c *linuxContainer) empty() bool {
	switch c.k {
	case ContainCgroup:
		b, err := os.ReadFile(filepath.Join(c.cg, "cgroup.events"))
		return err != nil || bytes.Contains(b, []byte("populated 0"))
	case ContainSubreaper:
		return true // the shim has no child left: nothing is below it
	}
	err := syscall.Kill(-c.pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

func (c *linuxContainer) close() { c.dropCgroup() }

func (c *linuxContainer) dropCgroup() {
	if c.cgDir != nil {
		c.cgDir.Close()
		c.cgDir = nil
		os.Remove(c.cg)
	}
}

func (c *linuxContainer) cgroupPids() []int {
	b, err := os.ReadFile(filepath.Join(c.cg, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// newCgroup creates name below this process's cgroup v2 and checks that it
// can be killed as a whole (cgroup.kill, Linux 5.14).
func newCgroup(name string) (string, error) {
	parent, err := ownCgroupDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		os.Remove(dir)
		return "", errors.New("no cgroup.kill (Linux before 5.14)")
	}
	return dir, nil
}

// ownCgroupDir is the directory of this process's cgroup in the cgroup v2
// hierarchy (mounted at /sys/fs/cgroup, or elsewhere on a hybrid system).
func ownCgroupDir() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	path := ""
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return "", errors.New("no cgroup v2 hierarchy")
	}
	mnt, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	if root != "/" {
		path = strings.TrimPrefix(path, root)
	}
	return filepath.Join(mnt, path), nil
}

func cgroup2Mount() (mnt, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], fields[3], nil
			}
		}
	}
	return "", "", errors.New("cgroup v2 is not mounted")
}

// descendants lists every process below pid, from the process table.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := ppid(p); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// ppid reads a process's parent from /proc/PID/stat (0 if it is gone).
func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// raisePriority puts the shim's threads in the real-time class
// (SCHED_FIFO, priority 10) when permitted (root, CAP_SYS_NICE or
// RLIMIT_RTPRIO), else at nice -10 if that is permitted, so that its stop
// at the lease deadline does not queue behind busy processes: measured on a
// 2-core machine at load 35, SIGKILL left at most 1.9 ms late in the
// real-time class, 44-103 ms at nice -10, 220 ms at nice 0. The shim sleeps
// but for a few system calls at each stop, so it takes no CPU from others.
// The command, started before, keeps the agent's scheduling; the shim
// starts nothing else. On Linux this is per thread; threads the runtime
// starts later inherit it (so no SCHED_RESET_ON_FORK, which would drop it
// for them). It returns what it got.
func raisePriority() string {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return "none"
	}
	got := "fifo"
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 10}
		if got == "fifo" && unix.SchedSetAttr(tid, &attr, 0) == nil {
			continue
		}
		got = "nice"
		if syscall.Setpriority(syscall.PRIO_PROCESS, tid, -10) != nil {
			return "none"
		}
	}
	return got
}

// probe reports what the shim would use for want, without changing this
// process (a cgroup is created and removed again).
func probe(want Containment) (Containment, string, error) {
	if want == ContainProcessGroup {
		return ContainProcessGroup, "", nil
	}
	var on int
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&on)), 0, 0, 0); err != nil {
		if want != ContainAuto {
			return "", "", fmt.Errorf("containment %s: no PR_SET_CHILD_SUBREAPER: %v", want, err)
		}
		return ContainProcessGroup, "no subreaper: " + err.Error(), nil
	}
	if want == ContainSubreaper {
		return ContainSubreaper, "", nil
	}
	dir, err := newCgroup(fmt.Sprintf("electcore-probe-%d", os.Getpid()))
	if err != nil {
		if want == ContainCgroup {
			return "", "", fmt.Errorf("containment cgroup: %v", err)
		}
		return ContainSubreaper, "no cgroup: " + err.Error(), nil
	}
	os.Remove(dir)
	return ContainCgroup, filepath.Dir(dir), nil
}
