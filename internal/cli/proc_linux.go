package cli

import (
	"runtime"
	"syscall"
)

// The command is started from the main goroutine, locked here to the main
// thread: Linux sends the parent-death signal when the thread that forked
// the child ends, and the main thread ends only with the process.
func init() { runtime.LockOSThread() }

// sysProcAttr runs the command in its own process group, so that
// forwarded signals and the lost-lease kill reach everything it started,
// and kills it if dlock itself dies (say, SIGKILL or the OOM killer):
// nothing would renew the lease any more.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
