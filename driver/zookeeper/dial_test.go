package zookeeper

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentAddr is a loopback address that accepts connections and never
// answers: a server that gives no session.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

// within runs f and fails the test at once if it has not returned after
// limit (f is then left to run: it may never return).
func within[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	began := time.Now()
	go func() { done <- f() }()
	select {
	case v := <-done:
		t.Logf("%s returned after %v", what, time.Since(began).Round(time.Millisecond))
		return v
	case <-time.After(limit):
		t.Fatalf("%s has not returned after %v", what, limit)
		panic("unreachable")
	}
}

// TestCallsUnreachable: on servers where nothing listens, lock.Open
// returns at once; a Try call with context.Background() reports the
// outage (ErrNotAcquired and ErrUnavailable wrapping the refused
// connection) once every server failed an attempt, Inspect too; a
// waiting call waits until its context ends, and says why it waited.
// Close does not wait for the clean-up of calls that sent nothing.
func TestCallsUnreachable(t *testing.T) {
	url := "zookeeper://u:pw@" + closedAddr(t) + "," + closedAddr(t) + "/x"
	l := within(t, time.Second, "Open", func() *lock.Locker {
		l, err := lock.Open(context.Background(), url)
		if err != nil {
			t.Errorf("Open: %v", err)
		}
		return l
	})
	if l == nil {
		t.FailNow()
	}
	bg := context.Background()
	err := within(t, 5*time.Second, "TryLock", func() error { _, err := l.TryLock(bg, "k"); return err })
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("TryLock: %v; want ErrNotAcquired and ErrUnavailable saying the servers are unreachable, wrapping ECONNREFUSED", err)
	}
	for _, c := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Lock", func(ctx context.Context) error { _, err := l.Lock(ctx, "k"); return err }},
		{"RLock", func(ctx context.Context) error { _, err := l.RLock(ctx, "k"); return err }},
	} {
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		err := within(t, 6*time.Second, c.name, func() error { return c.call(ctx) })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: %v; want its context's deadline, and ErrUnavailable wrapping ECONNREFUSED", c.name, err)
		}
	}
	err = within(t, 5*time.Second, "Inspect", func() error { _, err := l.Inspect(bg, "k"); return err })
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Inspect: %v; want the refused connection", err)
	}
	within(t, 2*time.Second, "Close", l.Close)
}

// TestFirstCallBoundedBySessionTimeout: a server that accepts connections
// and gives no session holds a call with context.Background() for the
// session timeout asked for, not longer; a call's context ends it sooner.
func TestFirstCallBoundedBySessionTimeout(t *testing.T) {
	l, err := lock.Open(context.Background(), "zookeeper://"+silentAddr(t)+"/x?session_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	began := time.Now()
	err = within(t, 3*time.Second, "TryLock", func() error { _, err := l.TryLock(context.Background(), "k"); return err })
	if took := time.Since(began); took < 900*time.Millisecond || !errors.Is(err, lock.ErrNotAcquired) || !strings.Contains(err.Error(), "no session within 1s") {
		t.Errorf("TryLock: %v after %v; want ErrNotAcquired, no session within the 1s asked for", err, took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = within(t, time.Second, "TryLock with a 200ms context", func() error { _, err := l.TryLock(ctx, "k"); return err })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryLock with a 200ms context: %v; want its deadline", err)
	}
}

// TestOpenBeforeServer: a Locker opened while its server is down connects
// in the background: once the server is up, Lock works, with no new
// Open. A TryLock while it is down reports the outage.
func TestOpenBeforeServer(t *testing.T) {
	z := testserver.StartZooKeeper(t, nil)
	z.RequireFaults(t)
	if err := z.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := lock.Open(context.Background(), "zookeeper://alice:pw@"+z.Addr()+"/late?session_timeout=4s")
	if err != nil {
		t.Fatalf("Open while the server is down: %v", err)
	}
	defer l.Close()
	if _, err := l.TryLock(context.Background(), "k"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("TryLock while the server is down: %v; want the refused connection", err)
	}
	if err := z.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lease, err := l.Lock(ctx, "k")
	if err != nil {
		t.Fatalf("Lock once the server is up: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// TestDialUnreachable: Dial with context.Background() returns once every
// server refused a connection, with the refusal; with a deadline, a
// server that gives no session ends it at the deadline, and the error
// wraps the context's.
func TestDialUnreachable(t *testing.T) {
	closed, silent := closedAddr(t), silentAddr(t)
	err := within(t, 5*time.Second, "Dial", func() error {
		l, err := Dial(context.Background(), []string{closed}, nil)
		if err == nil {
			l.Close()
		}
		return err
	})
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Dial of a closed port: %v; want the refused connection", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = within(t, time.Second, "Dial with a 300ms context", func() error {
		l, err := Dial(ctx, []string{silent}, nil)
		if err == nil {
			l.Close()
		}
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial of a silent server with a 300ms context: %v; want the context's deadline", err)
	}
}

// TestDialBoundsAttempts: until Dial returns, a connection attempt gets
// no more time than ctx has left (go-zookeeper asks for 1s).
func TestDialBoundsAttempts(t *testing.T) {
	got := make(chan time.Duration, 16)
	o := &Options{Dialer: func(network, address string, timeout time.Duration) (net.Conn, error) {
		select {
		case got <- timeout:
		default:
		}
		return nil, errors.New("no route (test dialer)")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, []string{"127.0.0.1:1"}, o)
	if err == nil || !strings.Contains(err.Error(), "no route (test dialer)") {
		t.Errorf("Dial: %v; want the dialer's error", err)
	}
	if d := <-got; d <= 0 || d > 200*time.Millisecond {
		t.Errorf("the first attempt was given %v; want at most the context's 200ms", d)
	}
}

// TestCloseEndsGoroutinesOfASilentServer: Close of a Locker from Dial
// leaves none of its goroutines behind even when the server never answers
// the closeSession request (on a busy ensemble, the quorum write can take
// seconds). go-zookeeper's Close waits a second for the reply and returns,
// leaving its reader blocked on the socket for two thirds of the session
// timeout; the driver must end it.
func TestCloseEndsGoroutinesOfASilentServer(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	var deaf atomic.Bool
	o := &Options{SessionTimeout: 10 * time.Second, Dialer: func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &silencedConn{Conn: c, silent: &deaf, closed: make(chan struct{})}, nil
	}}
	base := leakcheck.Take()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Dial(ctx, servers, o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	lease, err := l.Lock(ctx, "close-silent") // the session is up
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	deaf.Store(true) // from now on the server's replies are swallowed
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Close took %v with a silent server; want about a second", d)
	}
	leakcheck.Verify(t, base)
}

// silencedConn swallows what the server sends once silent is set: its
// reader blocks until the connection is closed.
type silencedConn struct {
	net.Conn
	silent *atomic.Bool
	once   sync.Once
	closed chan struct{}
}

func (c *silencedConn) Read(p []byte) (int, error) {
	if c.silent.Load() {
		<-c.closed
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(p)
	if err == nil && c.silent.Load() {
		<-c.closed
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *silencedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
