//go:build unix

package supervise

import (
	"errors"
	"os"
	"syscall"
)

// signalGroup sends SIGTERM (or SIGKILL) to the process group led by pid.
func signalGroup(pid int, p *os.Process, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.Signal(sig) // fall back to the process itself
	}
}

// killGroup sends SIGKILL to whatever remains of the group led by pid.
func killGroup(pid int, _ bool) { syscall.Kill(-pid, syscall.SIGKILL) }

// groupAlive reports whether any process remains in the group led by pid.
func groupAlive(pid int) bool {
	err := syscall.Kill(-pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
