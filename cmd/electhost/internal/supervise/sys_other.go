//go:build !unix

package supervise

import (
	"errors"
	"os"
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(_ int, p *os.Process, kill bool) {
	// No process groups or SIGTERM here: stop the process itself.
	p.Kill()
}

func killGroup(int, bool) {}

func groupAlive(int) bool { return false }

// No shim outside Unix: Options.Shim is refused by probe.
func shimProcAttr() *syscall.SysProcAttr { return nil }

func monoAt(time.Time) int64 { return 0 }

func probe(want Containment) (Containment, string, error) {
	return "", "", errors.New("containment " + string(want) + ": a supervising process needs Unix")
}

// RunShim does nothing outside Unix.
func RunShim([]string) {}
