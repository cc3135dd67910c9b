//go:build unix && !linux

package supervise

import "syscall"

// sysProcAttr puts the command in its own process group. There is no
// parent-death signal outside Linux.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// shimProcAttr: the shim gets its own process group; it learns of the
// agent's death from its control pipe reading EOF.
func shimProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
