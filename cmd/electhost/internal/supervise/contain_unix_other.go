//go:build unix && !linux

package supervise

import (
	"errors"
	"syscall"
)

func setPdeathsig(*syscall.SysProcAttr, syscall.Signal) {}

func raisePriority() string { return "none" }

// pgroupContainer: outside Linux the command's session (its process group)
// is all the shim can find; a descendant that calls setsid escapes it.
type pgroupContainer struct{ pid int }

func newContainer(want Containment) (container, string) {
	if want != ContainAuto && want != ContainProcessGroup {
		return nil, "containment " + string(want) + ": Linux only"
	}
	return &pgroupContainer{}, ""
}

func (c *pgroupContainer) kind() Containment                  { return ContainProcessGroup }
func (c *pgroupContainer) detail() string                     { return "" }
func (c *pgroupContainer) prepare(*syscall.SysProcAttr)       {}
func (c *pgroupContainer) fallback(*syscall.SysProcAttr) bool { return false }
func (c *pgroupContainer) started(pid int)                    { c.pid = pid }
func (c *pgroupContainer) signal(sig syscall.Signal)          { syscall.Kill(-c.pid, sig) }
func (c *pgroupContainer) kill()                              { syscall.Kill(-c.pid, syscall.SIGKILL) }
func (c *pgroupContainer) close()                             {}
func (c *pgroupContainer) empty() bool {
	return errors.Is(syscall.Kill(-c.pid, 0), syscall.ESRCH)
}

// probe reports what the shim would use.
func probe(want Containment) (Containment, string, error) {
	if want != ContainAuto && want != ContainProcessGroup {
		return "", "", errors.New("containment " + string(want) + ": Linux only")
	}
	return ContainProcessGroup, "", nil
}
