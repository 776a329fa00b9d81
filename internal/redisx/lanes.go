package redisx

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// failoverAddr is the Addr in the Options of go-redis's Sentinel client
// (NewFailoverClient).
const failoverAddr = "FailoverClient"

// Lanes run the drivers' commands so that each call returns by its
// context's end, on the caller's goroutine (driver.Caps.ReturnsAtContextEnd). Only a
// *redis.Client of one server (TCP, TLS or a unix socket) gets lanes for
// now: not a Cluster, nor a Sentinel client (see NewLanes).
//
// go-redis v9 stops a command at its context's deadline but not on its
// cancellation, and sets a fresh read deadline before every read, so a
// past deadline set from outside does not stop it either. What does is
// closing the connection: the read or write in flight fails, go-redis
// drops the connection as bad, and the call returns. A lane is a client of
// its own with one connection (PoolSize 1; on a Cluster one per node),
// made from the client's options, whose dial hook records every connection
// it opens. A call takes a free lane, arms context.AfterFunc(ctx, abort)
// and runs inline; abort closes the lane's connections and refuses its
// further dials. After the call the arm is stopped, and a lane whose abort
// ran is closed and discarded.
//
// go-redis v9.22 counts a closed connection's *net.OpError as retryable
// (shouldRetry: a net.Error that is not a timeout), and so do its pipeline,
// transaction and Cluster loops (MOVED/ASK redirects are followed on a
// node's connection of the same lane). Each retry first sleeps its backoff
// under ctx, which has ended when abort runs, so it returns ctx's error; a
// zero backoff (MinRetryBackoff -1) would leave that to a race, so an
// aborted lane also refuses to dial: a retry would need a new connection
// and gets none. That holds for commands sent under the call's context:
// one sent under a context detached from it retries past its end (with
// go-redis's backoff, each retry refused a connection), so a driver sends
// none on a lane (rediswatch's UNWATCH keeps the call's cancellation
// there, unwatchCtx). Nothing of an aborted call is sent after the abort. Its
// outcome is unknown, and the caller treats it as a lost reply (lock's
// late call clean-up).
//
// At most PoolSize lanes (the client's option; 10 per GOMAXPROCS by
// default) are open at once, so a Locker opens no more connections than
// its client's pool would (on a Cluster, per node). A call that finds
// every lane busy waits for one, or for its context's end. Clients of
// other kinds (a Ring, a wrapper) get no lanes: calls go to the client
// itself, and ReturnsAtContextEnd reports false.
type Lanes struct {
	hooks []redis.Hook // AddHook's, for lanes made from now on
	nodes []redis.Hook // AddNodeHook's
	mu    sync.Mutex   // guards hooks and nodes
	base  redis.UniversalClient
	mk    func(*lane) redis.UniversalClient // nil: no lanes
	free  chan *lane                        // idle lanes
	slots chan struct{}                     // one per open lane
	done  chan struct{}                     // closed by Close
	once  sync.Once
}

// errLaneAborted refuses a dial of a lane whose call was aborted.
var errLaneAborted = errors.New("redis lane aborted: the call's context ended")

// NewLanes returns the lanes of client: for a *redis.Client (also a
// Sentinel failover client); hook, when not nil, is added to every lane
// client too.
func NewLanes(client redis.UniversalClient, hook redis.Hook) *Lanes {
	ls := &Lanes{base: client, done: make(chan struct{})}
	n := 0
	switch c := client.(type) {
	case *redis.Client:
		if c.Options().Addr == failoverAddr {
			// No lanes on a Sentinel client: go-redis drops the
			// connections of the client's own pool when Sentinel names
			// a new primary, and a lane's would stay on the old one,
			// which still answers as primary until it is demoted (two
			// holders of a key, audit 39). Its calls keep the hand-off.
			break
		}
		n = c.Options().PoolSize
		ls.mk = func(ln *lane) redis.UniversalClient {
			hs, _ := ls.laneHooks(ln, hook)
			return singleLane(c.Options(), hs)
		}
	case *redis.ClusterClient:
		// No lanes yet: under the nemesis (redisnx-cluster, node pauses and
		// lost replies) calls on Cluster lanes returned up to 1.1s after
		// their context ended, cause not found. Cluster calls keep the
		// hand-off. (A Cluster lane was a ClusterClient of one connection
		// per node, whose NewClient added the lane's hooks to each node's
		// client: see the history of this file, clusterLane.)
	}
	n = max(n, 1)
	ls.free = make(chan *lane, n)
	ls.slots = make(chan struct{}, n)
	return ls
}

// singleLane makes a lane of a *redis.Client from its options: one
// connection, and a push processor and maintenance-notification settings
// of its own (a client's Options hold the processor it made, which a second
// client may not register its handlers on).
func singleLane(base *redis.Options, hooks []redis.Hook) redis.UniversalClient {
	o := *base
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	// base holds what the client's NewClient made of the user's options,
	// which NewClient makes defaults of again where the user turned
	// something off: no retries (-1, made 0) would be 3, no read timeout
	// 5 s. Those are given back as the user wrote them.
	off := func(d *time.Duration) {
		switch *d {
		case 0:
			*d = -1
		case -1:
			*d = -2
		}
	}
	off(&o.ReadTimeout)
	off(&o.WriteTimeout)
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	if o.MinRetryBackoff == 0 {
		o.MinRetryBackoff = -1
	}
	if o.MaxRetryBackoff == 0 {
		o.MaxRetryBackoff = -1
	}
	o.PushNotificationProcessor = nil
	// Not a copy of the client's: go-redis writes its Mode during a
	// connection's handshake, under a lock of its own (a copy raced it).
	// A lane's connection is short-lived and needs no notifications.
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	c := redis.NewClient(&o)
	for _, h := range hooks {
		c.AddHook(h)
	}
	return c
}

// laneHooks are the hooks of lane ln's client (hs; of each node's on a
// Cluster): ln's own, which records its connections, then the Core's
// (hook, when not nil), then AddHook's (AddNodeHook's on a Cluster, whose
// top-level client gets the Core's and AddHook's: top).
func (ls *Lanes) laneHooks(ln *lane, hook redis.Hook) (hs, top []redis.Hook) {
	hs = []redis.Hook{ln}
	if hook != nil {
		hs = append(hs, hook)
		top = append(top, hook)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	top = append(top, ls.hooks...)
	if _, ok := ls.base.(*redis.ClusterClient); ok {
		return append(hs, ls.nodes...), top
	}
	return append(hs, ls.hooks...), nil
}

// AddHook adds h to the lanes (to each node client of a Cluster lane), as
// redis.Client's AddHook: the hooks of the client the Locker was made with
// do not see the lanes' commands. Idle lanes are closed, to be made again
// with h; a lane busy meanwhile gets h when it is made again.
func (ls *Lanes) AddHook(h redis.Hook) {
	ls.mu.Lock()
	ls.hooks = append(ls.hooks, h)
	ls.mu.Unlock()
	ls.closeIdle()
}

// AddNodeHook adds h to each node client of the Cluster lanes, which
// make the connections (ClusterClient.OnNewNode's place).
func (ls *Lanes) AddNodeHook(h redis.Hook) {
	ls.mu.Lock()
	ls.nodes = append(ls.nodes, h)
	ls.mu.Unlock()
	ls.closeIdle()
}

func (ls *Lanes) closeIdle() {
	for {
		select {
		case ln := <-ls.free:
			_ = ln.client.Close()
			<-ls.slots
		default:
			return
		}
	}
}

// ReturnsAtContextEnd reports whether calls run on lanes, and so return by their
// context's end.
func (ls *Lanes) ReturnsAtContextEnd() bool { return ls.mk != nil }

// Do runs f with a lane's client (the client itself when there are no
// lanes); see Lanes. f must not keep the client.
func (ls *Lanes) Do(ctx context.Context, f func(redis.UniversalClient) error) error {
	if ls.mk == nil {
		return f(ls.base)
	}
	ln, err := ls.take(ctx)
	if err != nil {
		return err
	}
	defer ls.put(ln)
	return f(ln.client)
}

// take returns a free lane, or makes one while fewer than the bound are
// open, or waits for one; armed for ctx.
func (ls *Lanes) take(ctx context.Context) (*lane, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent
	}
	var ln *lane
	select {
	case ln = <-ls.free:
	default:
		select {
		case ln = <-ls.free:
		case ls.slots <- struct{}{}:
			ln = ls.newLane()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ls.done:
			return nil, redis.ErrClosed
		}
	}
	if ln.client == nil {
		<-ls.slots
		return nil, redis.ErrClosed
	}
	ln.mu.Lock()
	ln.sent = ln.ready
	ln.fresh = !ln.putAt.IsZero() && time.Since(ln.putAt) < freshFor
	ln.mu.Unlock()
	if ctx.Done() != nil {
		ln.stop = context.AfterFunc(ctx, ln.abortFn)
	}
	return ln, nil
}

func (ls *Lanes) newLane() *lane {
	ln := &lane{}
	ln.abortFn = ln.abort
	select {
	case <-ls.done:
	default:
		ln.client = ls.mk(ln)
	}
	return ln
}

// put disarms ln and frees it, or discards it when its abort ran or the
// lanes are closed.
func (ls *Lanes) put(ln *lane) {
	if ln.stop != nil {
		if !ln.stop() {
			ln.abortFn() // wait for a running abort; make sure it ran
		}
		ln.stop = nil
	}
	ln.mu.Lock()
	dead := ln.aborted
	ln.putAt, ln.fresh = time.Now(), false
	ln.mu.Unlock()
	select {
	case <-ls.done:
		dead = true
	default:
	}
	if !dead {
		ls.free <- ln // never blocks: at most cap(free) lanes exist
		return
	}
	<-ls.slots
	// Off the caller's path: a client's Close stops its maintenance
	// notifications' workers, which may take a while. The lane's
	// connections are closed already when its abort ran.
	go func() { _ = ln.client.Close() }()
}

// Close closes the idle lanes; a busy lane is closed when its call ends.
func (ls *Lanes) Close() {
	if ls.mk == nil {
		return
	}
	ls.once.Do(func() { close(ls.done) })
	for {
		select {
		case ln := <-ls.free:
			_ = ln.client.Close()
			<-ls.slots
		default:
			return
		}
	}
}

// A lane is one single-connection client and what its dial hook recorded.
type lane struct {
	client  redis.UniversalClient
	stop    func() bool // the armed AfterFunc's; nil when not armed
	abortFn func()      // abort, as a value made once
	mu      sync.Mutex
	aborted bool
	conns   []laneConn // the latest connection to each address
	ready   bool       // the lane's connection was set up: its HELLO answered
	sent    bool       // the call under way may have sent a command
	putAt   time.Time  // when the last call on the lane ended
	fresh   bool       // during a call: putAt was less than freshFor before it
}

type laneConn struct {
	addr string
	c    net.Conn
}

// abort closes the lane's connections and refuses its further dials.
func (ln *lane) abort() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.aborted = true
	for _, lc := range ln.conns {
		_ = lc.c.Close()
	}
	ln.conns = nil
}

// DialHook records each connection the lane opens; see Lanes.
func (ln *lane) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if ln.isAborted() {
			return nil, errLaneAborted
		}
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		ln.mu.Lock()
		defer ln.mu.Unlock()
		if ln.aborted {
			_ = c.Close()
			return nil, errLaneAborted
		}
		ln.record(addr, c)
		ln.ready = false // until its HELLO is answered
		if sc, ok := c.(syscall.Conn); ok {
			return &checkedConn{Conn: c, sc: sc, ln: ln}, nil
		}
		return c, nil
	}
}

// freshFor is how long after a call on a lane the next one skips go-redis's
// health check of the lane's idle connection (see checkedConn).
const freshFor = time.Second

// A checkedConn is a lane's connection as its client's pool sees it. When the
// pool takes an idle connection it checks it (go-redis's connCheck): a
// recvfrom with MSG_PEEK through the connection's SyscallConn, one system
// call per command, which finds a connection the server has closed, or
// one with bytes no command asked for. On a lane whose last call ended
// less than freshFor ago, SyscallConn hands over a RawConn that peeks
// nothing, and the check passes: two system calls fewer per Lock+Unlock
// (a twentieth of its client CPU). Nothing is left unread on a lane's
// connection between its calls: go-redis drops a connection whose reply
// was not read whole (an error or timeout), and a lane whose call was
// aborted is discarded. A connection the server closed meanwhile (a
// restart, CLIENT KILL) fails the command's write or read, which go-redis
// retries on a new connection (MaxRetries), as it does when the server
// closes it just after the check, and as it does on every TLS connection,
// which it never checks. A lane idle for longer is checked as before.
type checkedConn struct {
	net.Conn
	sc syscall.Conn
	ln *lane
}

func (c *checkedConn) SyscallConn() (syscall.RawConn, error) {
	c.ln.mu.Lock()
	fresh := c.ln.fresh
	c.ln.mu.Unlock()
	if fresh {
		return noPeek{}, nil
	}
	return c.sc.SyscallConn()
}

// noPeek is the RawConn of a fresh lane's connection for go-redis's health
// check: it runs nothing, so the check finds no error and no data.
type noPeek struct{}

func (noPeek) Control(func(fd uintptr)) error    { return nil }
func (noPeek) Read(func(fd uintptr) bool) error  { return nil }
func (noPeek) Write(func(fd uintptr) bool) error { return nil }

func (ln *lane) isAborted() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.aborted
}

// record keeps c as the connection to addr: a lane's pool holds one per
// address, so an earlier one has been closed.
func (ln *lane) record(addr string, c net.Conn) {
	for i := range ln.conns {
		if ln.conns[i].addr == addr {
			ln.conns[i].c = c
			return
		}
	}
	ln.conns = append(ln.conns, laneConn{addr, c})
}

// ProcessHook notes a connection's set-up: go-redis sends HELLO on a new
// connection, through the client's hooks, and sends nothing else on it
// before HELLO's reply. So a call during which no connection of the lane
// was set up, on a lane whose connection was not, sent nothing.
func (ln *lane) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "hello" && (err == nil || isReply(err)) {
			ln.mu.Lock()
			ln.ready, ln.sent = true, true
			ln.mu.Unlock()
		}
		return err
	}
}

// isReply reports whether err is the server's error reply. (Its own
// function: errors.As moves its target to the heap, which every command's
// hook would pay for.)
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// unsent marks cmd's error when the call on ln sent nothing (see
// ProcessHook), for NotSent.
func (ln *lane) unsent(cmd *redis.Cmd) *redis.Cmd {
	if ln == nil || cmd.Err() == nil {
		return cmd
	}
	ln.mu.Lock()
	sent := ln.sent
	ln.mu.Unlock()
	if !sent {
		cmd.SetErr(&notSentError{cmd.Err()})
	}
	return cmd
}

// notSentError is the error of a command that was never sent: its
// connection's set-up got no answer.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// NotSent reports whether err is that of a lane's script call that sent
// nothing to the server (its connection's set-up got no answer): such a
// call changed nothing there.
func NotSent(err error) bool {
	var ns *notSentError
	return errors.As(err, &ns)
}

func (ln *lane) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Lanes is a redis.Scripter: each command runs on a lane (see Do), so
// that a Script's Run (EVALSHA, then EVAL on NOSCRIPT) is prompt.
var _ redis.Scripter = (*Lanes)(nil)

func (ls *Lanes) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c, ln, err := ls.scripter(ctx)
	if err != nil {
		return errCmd(ctx, err)
	}
	defer ls.release(ln)
	return ln.unsent(c.Eval(ctx, script, keys, args...))
}

func (ls *Lanes) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	c, ln, err := ls.scripter(ctx)
	if err != nil {
		return errCmd(ctx, err)
	}
	defer ls.release(ln)
	return ln.unsent(c.EvalSha(ctx, sha1, keys, args...))
}

func (ls *Lanes) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c, ln, err := ls.scripter(ctx)
	if err != nil {
		return errCmd(ctx, err)
	}
	defer ls.release(ln)
	return ln.unsent(c.EvalRO(ctx, script, keys, args...))
}

func (ls *Lanes) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	c, ln, err := ls.scripter(ctx)
	if err != nil {
		return errCmd(ctx, err)
	}
	defer ls.release(ln)
	return ln.unsent(c.EvalShaRO(ctx, sha1, keys, args...))
}

func (ls *Lanes) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	c, ln, err := ls.scripter(ctx)
	if err != nil {
		cmd := redis.NewBoolSliceCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	defer ls.release(ln)
	return c.ScriptExists(ctx, hashes...)
}

func (ls *Lanes) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	c, ln, err := ls.scripter(ctx)
	if err != nil {
		cmd := redis.NewStringCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	defer ls.release(ln)
	return c.ScriptLoad(ctx, script)
}

// Process runs cmd, a command the caller built, on a lane (on the client
// itself when there are no lanes), as the Scripter methods do: a driver's
// script call without Script.Run's copies of its arguments. Its error is
// cmd's, marked as by those methods when the call sent nothing (NotSent).
func (ls *Lanes) Process(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	c, ln, err := ls.scripter(ctx)
	if err != nil {
		cmd.SetErr(err)
		return cmd
	}
	defer ls.release(ln)
	_ = c.Process(ctx, cmd)
	return ln.unsent(cmd)
}

// scripter returns the client for one command: a taken lane's (ln), or
// the client itself when there are no lanes (ln nil).
func (ls *Lanes) scripter(ctx context.Context) (redis.UniversalClient, *lane, error) {
	if ls.mk == nil {
		return ls.base, nil, nil
	}
	ln, err := ls.take(ctx)
	if err != nil {
		return nil, nil, err
	}
	return ln.client, ln, nil
}

func (ls *Lanes) release(ln *lane) {
	if ln != nil {
		ls.put(ln)
	}
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
