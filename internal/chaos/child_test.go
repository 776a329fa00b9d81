package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Child holders: the test binary started again with envHolder set runs
// holderMain, a worker serving the Holder RPC service on loopback and
// reporting to the parent's Sink RPC service, so that the parent stamps
// every event on the Resource's clock. The parent pauses (SIGSTOP) or kills
// (SIGKILL) the child while the child waits for the reply to a report, so
// the child is stopped at a known point: with a write decided but not yet
// applied, or inside Unlock, or between two steps of a control driver.

const (
	envHolder = "DLOCK_CHAOS_HOLDER" // the holder's name
	envSink   = "DLOCK_CHAOS_SINK"   // the parent's Sink RPC address
	envTarget = "DLOCK_CHAOS_TARGET" // the target's name
	envAddrs  = "DLOCK_CHAOS_ADDRS"  // backend addresses, comma-separated
	envTTL    = "DLOCK_CHAOS_TTL"    // the Locker's TTL
)

// ---- parent side ----

// parentSink serves the Sink RPC service to the children of one scenario.
type parentSink struct {
	res *Resource
	ln  net.Listener
	wg  sync.WaitGroup

	mu       sync.Mutex
	children map[string]*childHolder
	arms     map[string]*arm
	conns    []net.Conn
}

// arm is an action waiting for a child to reach one of points.
type arm struct {
	points  []string
	action  string        // "pause" or "kill"
	fired   chan struct{} // closed once the child is stopped (or dead)
	release chan struct{} // pause: closed by resume to let the child's call return
}

func newParentSink(res *Resource) (*parentSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ps := &parentSink{res: res, ln: ln, children: map[string]*childHolder{}, arms: map[string]*arm{}}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Sink", &SinkRPC{ps: ps}); err != nil {
		ln.Close()
		return nil, err
	}
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ps.mu.Lock()
			ps.conns = append(ps.conns, c)
			ps.mu.Unlock()
			ps.wg.Add(1)
			go func() {
				defer ps.wg.Done()
				srv.ServeConn(c)
			}()
		}
	}()
	return ps, nil
}

func (ps *parentSink) close() {
	ps.ln.Close()
	ps.mu.Lock()
	for _, c := range ps.conns {
		c.Close()
	}
	for _, a := range ps.arms {
		if a.release != nil {
			close(a.release)
		}
	}
	ps.arms = map[string]*arm{}
	ps.mu.Unlock()
	ps.wg.Wait()
}

// arm makes the child holder act (pause or kill) when it next reaches one
// of points ("write": a write about to be applied; "unlock": Unlock about
// to be called; a control driver's gap).
func (ps *parentSink) arm(holder, action string, points ...string) *arm {
	a := &arm{points: points, action: action, fired: make(chan struct{})}
	if action == "pause" {
		a.release = make(chan struct{})
	}
	ps.mu.Lock()
	ps.arms[holder] = a
	ps.mu.Unlock()
	return a
}

// fire acts on an armed holder that reached point.
func (ps *parentSink) fire(holder, point string) {
	ps.mu.Lock()
	a := ps.arms[holder]
	if a == nil || !slices.Contains(a.points, point) {
		ps.mu.Unlock()
		return
	}
	delete(ps.arms, holder)
	ch := ps.children[holder]
	ps.mu.Unlock()
	if ch == nil {
		close(a.fired)
		return
	}
	switch a.action {
	case "pause":
		ch.stop(a)
		close(a.fired)
		<-a.release
	case "kill":
		ch.kill()
		close(a.fired)
	}
}

// SinkRPC is the parent's RPC service for child holders.
type SinkRPC struct{ ps *parentSink }

// GrantArgs report a grant.
type GrantArgs struct {
	Holder, Key string
	Token       uint64
	DeadlineIn  time.Duration
}

// WriteArgs are a write attempt.
type WriteArgs struct {
	Holder     string
	ID         LeaseID
	Token      uint64
	DeadlineIn time.Duration
}

// EndArgs report Done or Unlock's result.
type EndArgs struct {
	ID  LeaseID
	Err string
}

// PointArgs report a checkpoint.
type PointArgs struct{ Holder, Point string }

func (s *SinkRPC) Grant(a GrantArgs, id *LeaseID) error {
	*id = s.ps.res.Grant(a.Key, a.Holder, a.Token, a.DeadlineIn)
	return nil
}

func (s *SinkRPC) Write(a WriteArgs, ok *bool) error {
	deadline := s.ps.res.Now() + Stamp(a.DeadlineIn) // as of the report, not of the write
	s.ps.fire(a.Holder, "write")
	var err error
	*ok, err = s.ps.res.Write(a.ID, a.Token, deadline)
	return err
}

func (s *SinkRPC) Done(a EndArgs, _ *bool) error {
	s.ps.res.Done(a.ID, a.Err)
	return nil
}

func (s *SinkRPC) Unlocking(id LeaseID, _ *bool) error {
	s.ps.res.Unlocking(id)
	return nil
}

func (s *SinkRPC) Unlocked(a EndArgs, _ *bool) error {
	s.ps.res.Unlocked(a.ID, a.Err)
	return nil
}

func (s *SinkRPC) Checkpoint(a PointArgs, _ *bool) error {
	s.ps.fire(a.Holder, a.Point)
	return nil
}

// childHolder is the parent's handle on a holder process.
type childHolder struct {
	name   string
	res    *Resource
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	client *rpc.Client
	exited chan struct{}

	logMu sync.Mutex
	log   bytes.Buffer

	mu       sync.Mutex
	pauseEnd func()
	armed    *arm
	dead     bool
}

// startChild starts a holder process for target tg over addrs.
func startChild(ps *parentSink, name string, tg *target, addrs []string, ttl time.Duration) (*childHolder, error) {
	c := &childHolder{name: name, res: ps.res, exited: make(chan struct{})}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		envHolder+"="+name, envSink+"="+ps.ln.Addr().String(), envTarget+"="+tg.name,
		envAddrs+"="+strings.Join(addrs, ","), envTTL+"="+ttl.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &lockedWriter{mu: &c.logMu, w: &c.log}
	c.cmd, c.stdin = cmd, stdin
	if err := spawn(cmd); err != nil {
		return nil, err
	}
	addrc := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		first := true
		for {
			line, err := r.ReadString('\n')
			if first && strings.HasPrefix(line, "holder listening ") {
				addrc <- strings.TrimSpace(strings.TrimPrefix(line, "holder listening "))
				first = false
			} else if line != "" {
				c.logMu.Lock()
				c.log.WriteString(line)
				c.logMu.Unlock()
			}
			if err != nil {
				break
			}
		}
		cmd.Wait()
		close(c.exited)
	}()
	var addr string
	select {
	case addr = <-addrc:
	case <-c.exited:
		return nil, fmt.Errorf("holder %s exited at start: %s", name, c.logTail())
	case <-time.After(20 * time.Second):
		c.kill()
		return nil, fmt.Errorf("holder %s did not start: %s", name, c.logTail())
	}
	c.client, err = rpc.Dial("tcp", addr)
	if err != nil {
		c.kill()
		return nil, err
	}
	ps.mu.Lock()
	ps.children[name] = c
	ps.mu.Unlock()
	return c, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (c *childHolder) logTail() string {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	s := c.log.String()
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}

func (c *childHolder) Name() string { return c.name }

// call makes an RPC to the child, failing if it died or d passed.
func (c *childHolder) call(method string, args, reply any, d time.Duration) error {
	call := c.client.Go("Holder."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		return call.Error
	case <-c.exited:
		return fmt.Errorf("holder %s died", c.name)
	case <-time.After(d):
		return fmt.Errorf("holder %s: %s took longer than %v", c.name, method, d)
	}
}

// LockReply is the outcome of Holder.Lock.
type LockReply struct {
	ID    LeaseID
	Token uint64
	DOA   int
	Fails int
	Err   *RemoteErr
}

func (c *childHolder) Lock(a LockArgs) (grant, error) {
	var r LockReply
	if err := c.call("Lock", a, &r, a.Timeout+10*time.Second); err != nil {
		return grant{}, err
	}
	return grant{r.ID, r.Token, r.DOA, r.Fails}, r.Err.err()
}

// lockAsync starts Lock and returns its outcome later (for a child that
// may be killed on the way).
func (c *childHolder) lockAsync(a LockArgs) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := c.Lock(a)
		ch <- err
	}()
	return ch
}

// UnlockReply is the outcome of Holder.Unlock.
type UnlockReply struct{ Err *RemoteErr }

func (c *childHolder) Unlock(timeout time.Duration) error {
	var r UnlockReply
	if err := c.call("Unlock", timeout, &r, timeout+10*time.Second); err != nil {
		return err
	}
	return r.Err.err()
}

func (c *childHolder) WaitDone(d time.Duration) bool {
	var ok bool
	if err := c.call("WaitDone", d, &ok, d+5*time.Second); err != nil {
		return false
	}
	return ok
}

func (c *childHolder) Close() error {
	var r UnlockReply
	if err := c.call("Close", true, &r, 15*time.Second); err != nil {
		return err
	}
	return r.Err.err()
}

// stop freezes the child with SIGSTOP and records the pause once every
// thread is stopped.
func (c *childHolder) stop(a *arm) {
	pid := c.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	waitStopped(pid, 5*time.Second)
	end := c.res.FaultStart("pause-holder", c.name)
	c.mu.Lock()
	c.pauseEnd, c.armed = end, a
	c.mu.Unlock()
}

// resume records the end of the pause, continues the child (SIGCONT) and
// lets the call it was stopped in return.
func (c *childHolder) resume() {
	c.mu.Lock()
	end, a := c.pauseEnd, c.armed
	c.pauseEnd, c.armed = nil, nil
	c.mu.Unlock()
	if end != nil {
		end()
	}
	syscall.Kill(c.cmd.Process.Pid, syscall.SIGCONT)
	if a != nil {
		close(a.release)
	}
}

// kill ends the child with SIGKILL and records it once it is gone.
func (c *childHolder) kill() {
	c.mu.Lock()
	dead := c.dead
	c.dead = true
	c.mu.Unlock()
	if dead {
		return
	}
	syscall.Kill(c.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
	}
	c.res.Killed(c.name)
}

// shutdown ends the child: it exits when its stdin closes; a child that
// does not is killed (without recording it as a fault).
func (c *childHolder) shutdown() {
	c.mu.Lock()
	dead := c.dead
	c.dead = true
	c.mu.Unlock()
	if !dead {
		c.resume() // a paused child's parked call must return
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(c.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-c.exited
	if c.client != nil {
		c.client.Close()
	}
}

// waitStopped waits until every thread of pid is stopped, so a pause is
// recorded only once the process can no longer act.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, p := range tasks {
			b, err := os.ReadFile(p)
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Pdeathsig fires when the parent's thread ends, so children are started
// from one goroutine locked to a thread that lives as long as the test
// binary (as internal/testserver does for servers).
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
			runtime.LockOSThread()
			for r := range spawnReqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- spawnReq{cmd, errc}
	return <-errc
}

// ---- child side ----

// holderMain is the child holder process.
func holderMain() int {
	name := os.Getenv(envHolder)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "holder %s: "+format+"\n", append([]any{name}, args...)...)
		return 1
	}
	tg := targetByName(os.Getenv(envTarget))
	if tg == nil {
		return fail("unknown target %q", os.Getenv(envTarget))
	}
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		return fail("%s: %v", envTTL, err)
	}
	sc, err := rpc.Dial("tcp", os.Getenv(envSink))
	if err != nil {
		return fail("dial sink: %v", err)
	}
	rs := &rpcSink{c: sc}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	locker, err := tg.open(ctx, strings.Split(os.Getenv(envAddrs), ","), ttl, hooks{
		checkpoint: func(point string) { rs.Checkpoint(name, point) },
	})
	if err != nil {
		return fail("open: %v", err)
	}
	w := &worker{name: name, locker: locker, sink: rs}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Holder", &HolderRPC{w: w}); err != nil {
		return fail("%v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail("%v", err)
	}
	fmt.Printf("holder listening %s\n", ln.Addr())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go srv.ServeConn(c)
		}
	}()
	io.Copy(io.Discard, os.Stdin) // until the parent closes it, or dies
	return 0
}

// HolderRPC is the child's RPC service.
type HolderRPC struct{ w *worker }

func (h *HolderRPC) Lock(a LockArgs, r *LockReply) error {
	id, tok, doa, fails, err := h.w.lock(a)
	*r = LockReply{ID: id, Token: tok, DOA: doa, Fails: fails, Err: wireErr(err)}
	return nil
}

func (h *HolderRPC) Unlock(timeout time.Duration, r *UnlockReply) error {
	r.Err = wireErr(h.w.unlock(timeout))
	return nil
}

func (h *HolderRPC) WaitDone(d time.Duration, ok *bool) error {
	*ok = h.w.waitDone(d)
	return nil
}

func (h *HolderRPC) Close(_ bool, r *UnlockReply) error {
	r.Err = wireErr(h.w.close())
	return nil
}

// rpcSink is a child's sink: the parent's Sink service.
type rpcSink struct{ c *rpc.Client }

func (s *rpcSink) Grant(holder, key string, token uint64, deadlineIn time.Duration) (LeaseID, error) {
	var id LeaseID
	err := s.c.Call("Sink.Grant", GrantArgs{holder, key, token, deadlineIn}, &id)
	return id, err
}

func (s *rpcSink) Write(holder string, id LeaseID, token uint64, deadlineIn time.Duration) (bool, error) {
	var ok bool
	err := s.c.Call("Sink.Write", WriteArgs{holder, id, token, deadlineIn}, &ok)
	return ok, err
}

func (s *rpcSink) Done(id LeaseID, errText string) {
	var ok bool
	s.c.Call("Sink.Done", EndArgs{id, errText}, &ok)
}

func (s *rpcSink) Unlocking(id LeaseID) {
	var ok bool
	s.c.Call("Sink.Unlocking", id, &ok)
}

func (s *rpcSink) Unlocked(id LeaseID, errText string) {
	var ok bool
	s.c.Call("Sink.Unlocked", EndArgs{id, errText}, &ok)
}

func (s *rpcSink) Checkpoint(holder, point string) {
	var ok bool
	s.c.Call("Sink.Checkpoint", PointArgs{holder, point}, &ok)
}
