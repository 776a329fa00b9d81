package chaos

import (
	"context"
	"fmt"
	"net/rpc"
	"os"
	"slices"
	"strings"
	"sync"
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
	rs  *RPCServer

	mu       sync.Mutex
	children map[string]*childHolder
	arms     map[string]*arm
}

// arm is an action waiting for a child to reach one of points.
type arm struct {
	points  []string
	action  string        // "pause" or "kill"
	fired   chan struct{} // closed once the child is stopped (or dead)
	release chan struct{} // pause: closed by resume to let the child's call return
}

func newParentSink(res *Resource) (*parentSink, error) {
	ps := &parentSink{res: res, children: map[string]*childHolder{}, arms: map[string]*arm{}}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Sink", &SinkRPC{ps: ps}); err != nil {
		return nil, err
	}
	rs, err := ServeRPC(srv)
	if err != nil {
		return nil, err
	}
	ps.rs = rs
	return ps, nil
}

func (ps *parentSink) close() {
	ps.mu.Lock()
	for _, a := range ps.arms {
		if a.release != nil {
			close(a.release)
		}
	}
	ps.arms = map[string]*arm{}
	ps.mu.Unlock()
	ps.rs.Close()
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
	*Child
	res    *Resource
	client *rpc.Client

	mu       sync.Mutex
	pauseEnd func()
	armed    *arm
}

// startChild starts a holder process for target tg over addrs.
func startChild(ps *parentSink, name string, tg *target, addrs []string, ttl time.Duration) (*childHolder, error) {
	child, addr, err := StartChild(name, []string{
		envHolder + "=" + name, envSink + "=" + ps.rs.Addr().String(), envTarget + "=" + tg.name,
		envAddrs + "=" + strings.Join(addrs, ","), envTTL + "=" + ttl.String()})
	if err != nil {
		return nil, fmt.Errorf("holder %s: %w", name, err)
	}
	c := &childHolder{Child: child, res: ps.res}
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

// call makes an RPC to the child, failing if it died or d passed.
func (c *childHolder) call(method string, args, reply any, d time.Duration) error {
	call := c.client.Go("Holder."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		return call.Error
	case <-c.Exited():
		return fmt.Errorf("holder %s died", c.Name())
	case <-time.After(d):
		return fmt.Errorf("holder %s: %s took longer than %v", c.Name(), method, d)
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
	c.Stop()
	end := c.res.FaultStart("pause-holder", c.Name())
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
	c.Continue()
	if a != nil {
		close(a.release)
	}
}

// kill ends the child with SIGKILL and records it once it is gone.
func (c *childHolder) kill() {
	if c.Kill() {
		c.res.Killed(c.Name())
	}
}

// shutdown ends the child: it exits when its stdin closes; a child that
// does not is killed (without recording it as a fault).
func (c *childHolder) shutdown() {
	if !c.Dead() {
		c.resume() // a paused child's parked call must return
	}
	c.Shutdown(5 * time.Second)
	if c.client != nil {
		c.client.Close()
	}
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
	locker, err := tg.open(ctx, strings.Split(os.Getenv(envAddrs), ","), ttl, Hooks{
		Checkpoint: func(point string) { rs.Checkpoint(name, point) },
	})
	if err != nil {
		return fail("open: %v", err)
	}
	w := &worker{name: name, locker: locker, sink: rs}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Holder", &HolderRPC{w: w}); err != nil {
		return fail("%v", err)
	}
	hs, err := ServeRPC(srv)
	if err != nil {
		return fail("%v", err)
	}
	ChildReady(hs.Addr())
	WaitForParent()
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
