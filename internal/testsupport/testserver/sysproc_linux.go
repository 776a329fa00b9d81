package testserver

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sysProcAttr puts the server in its own process group and asks the kernel
// to SIGKILL it when its parent dies, so no server outlives the test binary,
// not even after a panic, os.Exit or SIGKILL of the test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// helperSysProcAttr is sysProcAttr for the container helper, whose
// parent-death signal is SIGTERM: the helper then removes its containers
// before it exits (it does the same when its standard input ends).
func helperSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// Pdeathsig fires when the parent *thread* exits, not the process. Go may
// end an OS thread when a goroutine locked to it returns, which would kill a
// healthy server mid-test. So every process is started from one goroutine
// that locks its thread and never returns: that thread lives exactly as long
// as the test binary.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not be reused or ended
			for r := range spawnReqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- spawnReq{cmd, errc}
	return <-errc
}

// waitStopped waits until every thread of pid is in the stopped state, so
// that Pause returns only once the server can no longer answer: SIGSTOP is
// delivered asynchronously and a thread that is running at that moment may
// otherwise still complete a reply. A thread that has exited (a zombie)
// answers nothing either: a PostgreSQL backend whose client had just
// disconnected stays one while its parent, the postmaster, is paused and
// cannot reap it, and must not hold Pause up until the timeout.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		stopped, err := allThreadsStopped(pid)
		if err != nil || stopped {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped %v after SIGSTOP", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func allThreadsStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("process %d: no threads in /proc", pid)
	}
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, nil // thread just exited; look again
		}
		// "tid (comm) S ...": comm may contain anything, so cut at the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("%s: unexpected %q", path, b)
		}
		if s := b[i+2]; s != 'T' && s != 't' && s != 'Z' && s != 'X' {
			return false, nil
		}
	}
	return true, nil
}

// processAlive reports whether pid is a live process (not a zombie).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// processesIn returns the live processes whose working directory is dir
// (a zombie has none). PostgreSQL's processes all work in the data
// directory, and each starts a session of its own, so this finds them
// whatever their process group or parent.
func processesIn(dir string) []int {
	return findProcesses(func(cwd string) bool { return cwd == dir })
}

// processesUnder returns the live processes working in dir or below it.
func processesUnder(dir string) []int {
	return findProcesses(func(cwd string) bool { return cwd == dir || strings.HasPrefix(cwd, dir+"/") })
}

func findProcesses(match func(cwd string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && match(cwd) && processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
