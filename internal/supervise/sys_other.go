//go:build !unix

package supervise

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(_ int, p *os.Process, kill bool) {
	// No process groups or SIGTERM here: stop the process itself.
	p.Kill()
}

func killGroup(int, bool) {}

func groupAlive(int) bool { return false }
