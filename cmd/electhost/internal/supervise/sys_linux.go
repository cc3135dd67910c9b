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

// shimProcAttr: the shim gets its own process group (a terminal's Ctrl-C
// reaches only the agent), and SIGTERM from the kernel when the agent dies;
// it then stops the command. Its control pipe reading EOF says the same.
func shimProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
