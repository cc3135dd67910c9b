//go:build unix && !linux

package supervise

import "syscall"

// sysProcAttr puts the command in its own process group. There is no
// parent-death signal outside Linux.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
