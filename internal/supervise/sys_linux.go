//go:build linux

package supervise

import "syscall"

// sysProcAttr puts the command in its own process group (so the whole group
// can be signalled, and a terminal's Ctrl-C reaches only electhost, which
// decides), and asks the kernel to send it SIGTERM if this process dies.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits. Go
// only ends threads whose goroutine exits while locked with LockOSThread;
// Supervisor never locks threads, so this fires only when the process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
