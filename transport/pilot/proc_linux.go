//go:build linux

package pilot

import "syscall"

// pilotProcAttr asks the kernel to kill a pilotctl child when this process
// dies: a SIGKILLed agent must not leave subscriptions behind, which would
// keep receiving (and, on Pilot, keep a broker writing to them). Go ends a
// thread (which fires PR_SET_PDEATHSIG) only when a goroutine locked to it
// exits; the transport never locks threads.
func pilotProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
