//go:build !linux

package cli

import "syscall"

// sysProcAttr runs the command in its own process group, so that
// forwarded signals and the lost-lease kill reach everything it started.
// Outside Linux there is no parent-death signal: if dlock is killed, the
// command runs on without the lock.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
