package memcached

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bradfitz/gomemcache/memcache"
)

// Lanes make each driver call return by its context's end on the caller's
// goroutine (driver.Caps.ReturnsAtContextEnd), as the Redis drivers' lanes
// do (internal/redisx, lanes.go); lock then hands no call to a goroutine of
// its own, which cost about 80 µs of client CPU per Lock+Unlock.
//
// gomemcache takes no context: a request waits for its reply up to the
// client's Timeout. What stops it is a past deadline on its connection: the read or
// write in flight fails, gomemcache drops the connection, and the call
// returns (gomemcache retries nothing). A lane is a *memcache.Client of
// its own, made with the client's ServerSelector, Timeout and DialContext
// (read when the lane is made), that keeps one idle connection per server
// and whose dialer records each connection it opens. A call takes an idle
// lane (or makes one), arms context.AfterFunc(ctx, abort) and runs inline;
// abort stops the read or write in flight on the lane's connections and
// half-closes them (see laneNetConn: they are drained before they close,
// and a Release waits for that), cancels a dial under way and refuses
// further dials, so nothing of the call is sent after it. After the call
// the arm is stopped, and a lane whose abort ran is closed and discarded.
// An aborted call's outcome is unknown (the server may have run its
// request): lock treats it as a lost reply (its late call clean-up), as it
// treats a call that outlives its context on a goroutine of lock's.
//
// At most the client's MaxIdleConns lanes (gomemcache's
// DefaultMaxIdleConns when unset; read by New) stay idle, as the client
// keeps at most that many idle connections per server; a call that finds
// none makes a lane, as the client dials when it has no idle connection.
// So a Locker has as many connections open as the client would for the
// same calls. Close closes the idle lanes; a busy one is closed when its
// call ends.
//
// A Locker whose client's ServerSelector cannot be read (see selectorOf)
// has no lanes: its calls go to the client itself, on lock's goroutines.
type lanes struct {
	base *memcache.Client
	sel  memcache.ServerSelector // nil: no lanes
	max  int                     // idle lanes kept

	mu     sync.Mutex
	idle   []*lane
	closed bool
	drains map[chan struct{}]struct{} // of aborted lanes' connections (drain)
}

// errLaneAborted refuses a dial of a lane whose call was aborted.
var errLaneAborted = errors.New("memcached lane aborted: the call's context ended")

// newLanes returns the lanes of c, whose ServerSelector is sel (nil: no
// lanes).
func newLanes(c *memcache.Client, sel memcache.ServerSelector) *lanes {
	ls := &lanes{base: c, sel: sel}
	if c != nil {
		ls.max = c.MaxIdleConns
	}
	if ls.max < 1 {
		ls.max = memcache.DefaultMaxIdleConns
	}
	return ls
}

// selectorOf returns the ServerSelector c was made with, or nil when it
// cannot be read. A *memcache.Client keeps it in an unexported field with
// no accessor; memcache.New and NewFromSelector set it, and nothing
// changes it after, so reading it races with nothing. A gomemcache whose
// Client has no such field gives nil, and the Locker no lanes
// (TestLanesOfNew fails, to say so).
func selectorOf(c *memcache.Client) memcache.ServerSelector {
	if c == nil {
		return nil
	}
	f := reflect.ValueOf(c).Elem().FieldByName("selector")
	if !f.IsValid() || f.Type() != reflect.TypeFor[memcache.ServerSelector]() {
		return nil
	}
	sel, _ := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(memcache.ServerSelector)
	return sel
}

// noSelector reports whether c has a ServerSelector field that is nil: a
// client not made by memcache.New or NewFromSelector (&memcache.Client{}),
// on which every gomemcache call panics.
func noSelector(c *memcache.Client) bool {
	f := reflect.ValueOf(c).Elem().FieldByName("selector")
	return f.IsValid() && f.Kind() == reflect.Interface && f.IsNil()
}

// returnsAtContextEnd reports whether calls run on lanes.
func (ls *lanes) returnsAtContextEnd() bool { return ls.sel != nil }

// take returns the client for one driver call: an idle or new lane's,
// armed for ctx, or the client itself (ln nil) when there are no lanes or
// they are closed. put(ln) must follow.
func (ls *lanes) take(ctx context.Context) (c *memcache.Client, ln *lane, err error) {
	if ls.sel == nil {
		return ls.base, nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err // nothing sent
	}
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return ls.base, nil, nil
	}
	if n := len(ls.idle); n > 0 {
		ln = ls.idle[n-1]
		ls.idle[n-1] = nil
		ls.idle = ls.idle[:n-1]
	}
	ls.mu.Unlock()
	if ln == nil {
		ln = ls.newLane()
	}
	if ctx.Done() != nil {
		ln.stop = context.AfterFunc(ctx, ln.abortFn)
	}
	return ln.c, ln, nil
}

func (ls *lanes) newLane() *lane {
	ln := &lane{ls: ls, dialer: ls.base.DialContext, own: ls.base.DialContext != nil}
	if ln.dialer == nil {
		var d net.Dialer // gomemcache's dial bounds ctx by its Timeout
		ln.dialer = d.DialContext
	}
	ln.abortFn = ln.abort
	ln.c = memcache.NewFromSelector(ls.sel)
	ln.c.Timeout = ls.base.Timeout
	ln.c.MaxIdleConns = 1
	ln.c.DialContext = ln.dial
	return ln
}

// put disarms ln and keeps it idle, or closes it when its abort ran, the
// lanes are closed or enough are idle. ln nil (take gave the client
// itself) is nothing to put.
func (ls *lanes) put(ln *lane) {
	if ln == nil {
		return
	}
	if ln.stop != nil {
		if !ln.stop() {
			ln.abortFn() // the abort has started: make sure it is done
		}
		ln.stop = nil
	}
	ln.mu.Lock()
	dead := ln.aborted
	ln.mu.Unlock()
	if !dead {
		ls.mu.Lock()
		if !ls.closed && len(ls.idle) < ls.max {
			ls.idle = append(ls.idle, ln)
			ls.mu.Unlock()
			return
		}
		ls.mu.Unlock()
	}
	_ = ln.c.Close()
}

// close closes the idle lanes, and makes put close the busy ones.
func (ls *lanes) close() {
	ls.mu.Lock()
	idle := ls.idle
	ls.idle, ls.closed = nil, true
	ls.mu.Unlock()
	for _, ln := range idle {
		_ = ln.c.Close()
	}
}

// A lane is one client of its own and the connections its dialer opened.
type lane struct {
	ls      *lanes
	c       *memcache.Client
	dialer  func(ctx context.Context, network, addr string) (net.Conn, error)
	own     bool        // dialer is the client's own, which may not heed ctx
	stop    func() bool // the armed AfterFunc's; nil when not armed
	abortFn func()      // abort, as a value made once
	mu      sync.Mutex
	dead    atomic.Bool // aborted, read without mu by the connections' Read and Write
	aborted bool
	conns   []laneConn         // the latest connection to each address
	cancel  context.CancelFunc // of the dial under way, if any
}

type laneConn struct {
	addr string
	c    net.Conn
}

// abort closes the lane's connections, cancels its dial under way and
// refuses its further dials.
func (ln *lane) abort() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.aborted = true
	ln.dead.Store(true)
	if ln.cancel != nil {
		ln.cancel()
	}
	for _, lc := range ln.conns {
		shut(lc.c)
	}
	ln.conns = nil
}

// shut stops the read or write in flight on c and sends the server its
// end of the stream (c is drained and closed when gomemcache closes it,
// see laneNetConn.Close); c is closed at once if it cannot half-close.
func shut(c net.Conn) {
	_ = c.SetDeadline(time.Now())
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	_ = c.Close()
}

// dial is the lane client's DialContext: the client's dialer, cancelled
// by abort, its connection recorded.
func (ln *lane) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln.mu.Lock()
	if ln.aborted {
		ln.mu.Unlock()
		return nil, errLaneAborted
	}
	ln.cancel = cancel
	ln.mu.Unlock()
	var c net.Conn
	var err error
	if ln.own {
		c, err = dialWithin(ctx, ln.dialer, network, addr)
	} else {
		c, err = ln.dialer(ctx, network, addr)
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.cancel = nil
	switch {
	case ln.aborted:
		if err == nil {
			_ = c.Close()
		}
		return nil, errLaneAborted
	case err != nil:
		return nil, err
	}
	ln.record(addr, c)
	return &laneNetConn{Conn: c, ln: ln}, nil
}

// A laneNetConn is a lane's connection as its client sees it. Once the
// lane is aborted it reads, writes and sets deadlines no more (gomemcache
// sets a fresh deadline before each request, which must not undo
// abort's), and its Close drains the connection before closing it.
//
// Why drain: an aborted request may have reached the server, which runs
// it even though the client closed the connection; and memcached serves
// each connection on its own, so a lost reply's release by owner, sent
// on another connection, could be run before it: an add run after the
// release that should have undone it leaves a grant that no one holds
// until its TTL (TestAudit45AbortAnywhere). memcached runs what it read
// on a connection before it sees the connection's end and closes it, so
// once the server closed a connection that abort half-closed, nothing
// sent on it is still to run; Release waits for that (lanes.settle).
type laneNetConn struct {
	net.Conn
	ln      *lane
	drained bool // guarded by ln.mu
}

func (c *laneNetConn) Read(p []byte) (int, error) {
	if c.ln.dead.Load() {
		return 0, errLaneAborted
	}
	return c.Conn.Read(p)
}

func (c *laneNetConn) Write(p []byte) (int, error) {
	if c.ln.dead.Load() {
		return 0, errLaneAborted
	}
	return c.Conn.Write(p)
}

func (c *laneNetConn) SetDeadline(t time.Time) error {
	if c.ln.dead.Load() {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *laneNetConn) SetReadDeadline(t time.Time) error {
	if c.ln.dead.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *laneNetConn) SetWriteDeadline(t time.Time) error {
	if c.ln.dead.Load() {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

// Close closes the connection, or drains it if the lane was aborted
// (after abort, which holds ln.mu, has shut it).
func (c *laneNetConn) Close() error {
	c.ln.mu.Lock()
	defer c.ln.mu.Unlock()
	if !c.ln.aborted {
		return c.Conn.Close()
	}
	if !c.drained {
		c.drained = true
		c.ln.ls.drain(c.Conn)
	}
	return nil
}

// drain reads c, which abort shut, until the server closes it (or for
// drainFor at most), then closes it; settle waits for it.
func (ls *lanes) drain(c net.Conn) {
	done := make(chan struct{})
	ls.mu.Lock()
	if ls.drains == nil {
		ls.drains = make(map[chan struct{}]struct{})
	}
	ls.drains[done] = struct{}{}
	ls.mu.Unlock()
	go func() {
		_ = c.SetDeadline(time.Now().Add(max(ls.base.Timeout, drainFor)))
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()
		ls.mu.Lock()
		delete(ls.drains, done)
		ls.mu.Unlock()
		close(done)
	}()
}

// drainFor is the least time a drain waits for the server's end of an
// aborted connection (the client's Timeout when longer).
const drainFor = time.Second

// settle waits until the connections being drained now are closed, or
// ctx's end: a release sent after them runs after whatever was sent on
// them.
func (ls *lanes) settle(ctx context.Context) error {
	ls.mu.Lock()
	if len(ls.drains) == 0 {
		ls.mu.Unlock()
		return nil
	}
	wait := make([]chan struct{}, 0, len(ls.drains))
	for ch := range ls.drains {
		wait = append(wait, ch)
	}
	ls.mu.Unlock()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// record keeps c as the connection to addr: a lane's client keeps one
// per address, and uses one at a time, so an earlier one has been closed
// or is idle, unused by the call under way.
func (ln *lane) record(addr string, c net.Conn) {
	for i := range ln.conns {
		if ln.conns[i].addr == addr {
			ln.conns[i].c = c
			return
		}
	}
	ln.conns = append(ln.conns, laneConn{addr, c})
}

// dialWithin runs a client's own dialer, which may not heed ctx (one that
// calls net.Dial, or waits on something else), on a goroutine of its own,
// and returns at ctx's end at the latest: the call on the lane must return
// by its context's end (lock makes it on the caller's goroutine). A
// connection that comes after is closed.
func dialWithin(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := dial(ctx, network, addr)
		res <- result{c, err}
	}()
	select {
	case r := <-res:
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.err == nil {
				_ = r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}
