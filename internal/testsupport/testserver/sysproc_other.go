//go:build unix && !linux

package testserver

import (
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr puts the server in its own process group. Outside Linux there
// is no parent-death signal: servers are killed by the cleanups, and a test
// binary that is itself killed may leave them running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// helperSysProcAttr is sysProcAttr for the container helper, which removes
// its containers and exits when its standard input ends.
func helperSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func spawn(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped cannot observe the stop outside Linux; it waits briefly so
// SIGSTOP has been delivered.
func waitStopped(pid int, timeout time.Duration) error {
	time.Sleep(50 * time.Millisecond)
	return nil
}

// processAlive reports whether pid exists.
func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// processesIn cannot find processes by working directory outside Linux:
// the hooks reach the server's process group only.
func processesIn(dir string) []int { return nil }

func processesUnder(dir string) []int { return nil }
