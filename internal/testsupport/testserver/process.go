package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// errAddrInUse marks a start that failed because another process took the
// port between FreePorts and the server's bind; starters retry on new ports.
var errAddrInUse = errors.New("address already in use")

// process is one local server process with its fault hooks. It implements
// Node. The process runs in its own process group (so a signal reaches the
// children too, e.g. a Redis rewrite child) and, on Linux, receives SIGKILL
// when the test binary dies (see sysproc_linux.go).
type process struct {
	name    string                          // for messages, e.g. "redis-server 127.0.0.1:6379"
	addr    string                          // client address
	argv    []string                        // command line
	dir     string                          // working and data directory
	logPath string                          // stdout and stderr of every run
	ready   func(ctx context.Context) error // one readiness probe
	timeout time.Duration                   // readiness deadline per start

	// cred, when set, runs the process as another user (PostgreSQL and
	// PgBouncer refuse to run as root).
	cred *syscall.Credential
	// stopSig is the signal Stop sends to ask for a graceful exit
	// (0: SIGTERM; PostgreSQL's fast shutdown is SIGINT).
	stopSig syscall.Signal
	// members, when set, lists the live processes of the server that are
	// outside its process group (PostgreSQL's children each start a session
	// of their own), including after the main process died and they were
	// reparented. The hooks signal them too, and Kill waits until there
	// are none.
	members func() []int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	runs int
}

func (p *process) Addr() string { return p.addr }

// start runs the process and waits until it is ready. On failure the process
// is killed and the error carries the log tail.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running() {
		return fmt.Errorf("testserver: %s: already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: %s: %w", p.name, err)
	}
	p.runs++
	fmt.Fprintf(logf, "--- testserver: start #%d at %s: %s\n", p.runs, time.Now().Format(time.RFC3339Nano), strings.Join(p.argv, " "))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir = p.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = p.cred
	err = spawn(cmd)
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("testserver: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done

	if err := p.waitReady(); err != nil {
		p.killLocked()
		if strings.Contains(p.logTail(4096), "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return err
	}
	return nil
}

func (p *process) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = p.ready(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("testserver: %s exited during startup (%v); log %s:\n%s",
				p.name, p.cmd.ProcessState, p.logPath, p.logTail(2048))
		case <-ctx.Done():
			return fmt.Errorf("testserver: %s not ready after %v (last probe: %v); log %s:\n%s",
				p.name, p.timeout, last, p.logPath, p.logTail(2048))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// running reports whether the process is alive (possibly stopped). p.mu held.
func (p *process) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() {
		return fmt.Errorf("testserver: %s: not running", p.name)
	}
	return p.signalLocked(sig)
}

func (p *process) signalLocked(sig syscall.Signal) error {
	// Negative pid: the whole process group (Setpgid makes pgid == pid).
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testserver: %s: send %v: %w", p.name, sig, err)
	}
	return p.signalMembers(sig)
}

// signalMembers sends sig to the server's processes outside its group.
func (p *process) signalMembers(sig syscall.Signal) error {
	if p.members == nil {
		return nil
	}
	for _, pid := range p.members() {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("testserver: %s: send %v to %d: %w", p.name, sig, pid, err)
		}
	}
	return nil
}

// Pause stops the process with SIGSTOP: its sockets stay open and the kernel
// still accepts connections, but nothing is answered until Resume.
func (p *process) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() {
		return fmt.Errorf("testserver: %s: not running", p.name)
	}
	if err := p.signalLocked(syscall.SIGSTOP); err != nil {
		return err
	}
	if err := waitStopped(p.cmd.Process.Pid, 5*time.Second); err != nil {
		return fmt.Errorf("testserver: %s: %w", p.name, err)
	}
	if p.members != nil {
		for _, pid := range p.members() {
			// A member that exits meanwhile has no threads left to wait for.
			if err := waitStopped(pid, 5*time.Second); err != nil && processAlive(pid) {
				return fmt.Errorf("testserver: %s: %w", p.name, err)
			}
		}
	}
	return nil
}

// Resume continues a paused process with SIGCONT.
func (p *process) Resume() error { return p.signal(syscall.SIGCONT) }

// Kill sends SIGKILL and waits until the process is gone. Killing a process
// that is not running is not an error.
func (p *process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killLocked()
}

func (p *process) killLocked() error {
	if !p.running() {
		return nil
	}
	if err := p.signalLocked(syscall.SIGKILL); err != nil {
		return err
	}
	deadline := time.After(10 * time.Second)
	select {
	case <-p.done:
	case <-deadline:
		return fmt.Errorf("testserver: %s: still alive 10s after SIGKILL", p.name)
	}
	return p.waitMembersGone(deadline)
}

// waitMembersGone kills the server's remaining processes outside its group
// until there are none (a member may have been forked just before the
// main process died).
func (p *process) waitMembersGone(deadline <-chan time.Time) error {
	if p.members == nil {
		return nil
	}
	for {
		left := p.members()
		if len(left) == 0 {
			return nil
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-deadline:
			return fmt.Errorf("testserver: %s: processes %v still alive 10s after SIGKILL", p.name, left)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Stop asks the process to exit with SIGTERM (or its stopSig; resuming it
// if paused) and kills it if it has not exited within 5 seconds.
func (p *process) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() {
		return nil
	}
	sig := p.stopSig
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if p.members != nil {
		// Only the main process: it ends its children in its own way.
		if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("testserver: %s: send %v: %w", p.name, sig, err)
		}
	} else if err := p.signalLocked(sig); err != nil {
		return err
	}
	p.signalLocked(syscall.SIGCONT)
	select {
	case <-p.done:
		return p.waitMembersGone(time.After(5 * time.Second))
	case <-time.After(5 * time.Second):
		return p.killLocked()
	}
}

// Restart kills the process if it is running, starts it again with the same
// command line (same port, same data directory) and waits until it is ready.
func (p *process) Restart() error {
	if err := p.Kill(); err != nil {
		return err
	}
	return p.start()
}

// LogTail returns about the last n bytes of the process's log.
func (p *process) LogTail(n int) string { return p.logTail(n) }

func (p *process) logTail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(n) {
		f.Seek(st.Size()-int64(n), io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	s := string(b)
	if len(b) == n {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:] // drop the partial first line
		}
	}
	return s
}

// startWithRetry calls try until it succeeds or fails for a reason other
// than a port taken between choosing and binding it.
func startWithRetry(try func() error) error {
	var err error
	for range 4 {
		if err = try(); !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	return err
}

// Spawn starts cmd as testserver starts its servers: on Linux from the one
// OS thread that lives as long as the binary, so that a parent-death signal
// in cmd.SysProcAttr fires when the binary dies, not when some thread
// ends. The chaos tooling starts its child processes with it.
func Spawn(cmd *exec.Cmd) error { return spawn(cmd) }

// WaitStopped waits until every thread of pid is stopped, after a SIGSTOP,
// so that a pause counts only once the process can no longer act (outside
// Linux it waits briefly).
func WaitStopped(pid int, timeout time.Duration) error { return waitStopped(pid, timeout) }
