//go:build !linux

package pilot

import "syscall"

// pilotProcAttr: no parent-death signal outside Linux; Close still kills
// every pilotctl child.
func pilotProcAttr() *syscall.SysProcAttr { return nil }
