package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// go-zookeeper's calls block until the reply comes or the connection fails
// and take no context. The helpers below run a call in a goroutine and let
// the caller stop waiting when its context ends; the call itself then
// completes on its own (requests cannot be withdrawn once queued). Every
// call that succeeds is recorded for the proof that the session lives
// (see monitor.answered).

// future is a call under way.
type future[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// start runs f in the background. With proof set, a success is recorded as
// proof that the session was alive when f was called.
func start[T any](d *zkDriver, proof bool, f func() (T, error)) *future[T] {
	fu := &future[T]{done: make(chan struct{})}
	d.calls.Add(1)
	go func() {
		defer d.calls.Done()
		fu.v, fu.err = run(d, proof, f)
		close(fu.done)
	}()
	return fu
}

// run calls f and records its answer for the session's proof (see
// monitor.answered): any success touched the session; with proof set (a
// write or sync), it also shows the leader reachable.
func run[T any](d *zkDriver, proof bool, f func() (T, error)) (T, error) {
	sid, t := d.conn.SessionID(), time.Now()
	v, err := f()
	if err == nil && d.conn.SessionID() == sid {
		d.mon.answered(sid, t, proof)
	}
	return v, err
}

// wait returns f's result, or ctx's error if ctx ends first.
func (fu *future[T]) wait(ctx context.Context) (T, error) {
	select {
	case <-fu.done:
		return fu.v, fu.err
	case <-ctx.Done():
		select {
		case <-fu.done: // both ready: the result wins
			return fu.v, fu.err
		default:
		}
		var zero T
		return zero, ctx.Err()
	}
}

// read makes one request that proves nothing about the session (a read,
// which a follower answers from its own copy).
func read[T any](ctx context.Context, d *zkDriver, f func() (T, error)) (T, error) {
	return call(ctx, d, false, f)
}

// write makes one request that goes through the leader, which checks the
// session (create, delete, multi, sync).
func write[T any](ctx context.Context, d *zkDriver, f func() (T, error)) (T, error) {
	return call(ctx, d, true, f)
}

func call[T any](ctx context.Context, d *zkDriver, proof bool, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	if ctx.Done() == nil { // cannot end: no need for a goroutine
		return run(d, proof, f)
	}
	return start(d, proof, f).wait(ctx)
}

// ambiguous reports whether a request that failed with err may still have
// been applied: the connection broke after it was sent.
func ambiguous(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// The negotiated session timeout. go-zookeeper does not expose it, so the
// connections Dial makes are wrapped to read it from the server's connect
// response, the first frame of every connection:
//
//	int32 length, int32 protocolVersion, int32 timeOut (ms), int64 sessionId, ...
type timeoutConn struct {
	net.Conn
	seen int
	hdr  [12]byte
	set  func(time.Duration)
}

func (c *timeoutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.seen < len(c.hdr) && n > 0 {
		k := copy(c.hdr[c.seen:], p[:n])
		c.seen += k
		if c.seen == len(c.hdr) {
			if ms := int32(binary.BigEndian.Uint32(c.hdr[8:12])); ms > 0 {
				c.set(time.Duration(ms) * time.Millisecond)
			}
		}
	}
	return n, err
}

// negotiatedTimeout holds the session timeout the server granted.
type negotiatedTimeout struct {
	mu sync.Mutex
	d  time.Duration
	ch chan struct{} // closed when first set
}

func newNegotiatedTimeout() *negotiatedTimeout {
	return &negotiatedTimeout{ch: make(chan struct{})}
}

func (n *negotiatedTimeout) set(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.d == 0 {
		close(n.ch)
	}
	n.d = d
}

func (n *negotiatedTimeout) get() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.d
}

// wrapDialer makes dial's connections report the negotiated timeout to n.
func (n *negotiatedTimeout) wrapDialer(dial zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &timeoutConn{Conn: c, set: n.set}, nil
	}
}
