package memcached

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// abortBound is how long a call may take after its context is cancelled.
const abortBound = 2 * time.Second

// TestLanesOfNew: a Locker made by New over a client of memcache.New, or
// by Open, runs its calls on lanes (lanes.go) and so returns at their
// context's end on the caller's goroutine; a client made otherwise than
// by gomemcache's constructors has none.
func TestLanesOfNew(t *testing.T) {
	c := sharedClient(t)
	d, _ := newDriverOptions(c, selectorOf(c), nil, false)
	if !d.Capabilities().ReturnsAtContextEnd {
		t.Fatal("no lanes over a client of memcache.New: its ServerSelector could not be read (selectorOf)")
	}
	u, _ := url.Parse("memcached://" + testserver.SharedMemcached(t).Addr())
	od, _, err := open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer od.Close()
	if !od.(*mcDriver).Capabilities().ReturnsAtContextEnd {
		t.Fatal("no lanes over the client Open made")
	}
	if selectorOf(&memcache.Client{}) != nil {
		t.Fatal("selectorOf of a client without a selector is not nil")
	}
}

// TestLaneAbort: a call whose reply a proxy holds returns once its
// context is cancelled (its lane's connection is closed), although the
// client would wait for the reply for a minute (its Timeout), and its lost
// reply is cleaned up: the key is free afterwards, long before its TTL.
// With an abort that does not close the connection, each call waits for
// the held reply.
func TestLaneAbort(t *testing.T) {
	srv := testserver.SharedMemcached(t)
	admin := memcache.New(srv.Addr())
	t.Cleanup(func() { admin.Close() })
	proxy := redistest.StartHoldingProxy(t, srv.Addr())
	c := memcache.New(proxy.Addr())
	c.Timeout = time.Minute
	t.Cleanup(func() { c.Close() })
	d, lo := newDriverOptions(c, selectorOf(c), &Options{Options: lock.Options{TTL: time.Minute}}, false)
	if !d.Capabilities().ReturnsAtContextEnd {
		t.Fatal("no lanes")
	}
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	free := func(what, k string) {
		t.Helper()
		lk := d.keys(k).lock
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := admin.Get(lk)
			if errors.Is(err, memcache.ErrCacheMiss) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: key still held after the aborted call (get: %v)", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	held := func(t *testing.T, k string) *lock.Lease {
		le, err := l.TryLock(testCtx(t), k)
		if err != nil {
			t.Fatal(err)
		}
		return le
	}
	t.Run("TryLock", func(t *testing.T) {
		k := testKey(t)
		abortHeld(t, proxy, func(ctx context.Context) error { _, err := l.TryLock(ctx, k); return err })
		free("TryLock", k)
	})
	t.Run("Lock", func(t *testing.T) {
		k := testKey(t)
		abortHeld(t, proxy, func(ctx context.Context) error { _, err := l.Lock(ctx, k); return err })
		free("Lock", k)
	})
	t.Run("Reentry", func(t *testing.T) {
		k := testKey(t)
		abortHeld(t, proxy, func(ctx context.Context) error {
			_, err := l.TryLock(ctx, k, lock.WithOwner("0123456789abcdef"))
			return err
		})
		free("Reentry", k)
	})
	t.Run("Unlock", func(t *testing.T) {
		k := testKey(t)
		le := held(t, k)
		abortHeld(t, proxy, le.Unlock)
		free("Unlock", k)
	})
	t.Run("Refresh", func(t *testing.T) {
		k := testKey(t)
		le := held(t, k)
		abortHeld(t, proxy, func(ctx context.Context) error { return le.Refresh(ctx, time.Minute) })
		_ = le.Unlock(testCtx(t))
		free("Refresh", k)
	})
}

// abortHeld runs call with the proxy holding every reply, cancels its
// context after 100ms and fails t unless call returns within abortBound.
func abortHeld(t *testing.T, proxy *redistest.HoldingProxy, call func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proxy.Hold.Store(true)
	defer proxy.Hold.Store(false)
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the call succeeded with its reply held")
		}
	case <-time.After(abortBound):
		proxy.Hold.Store(false)
		err := <-done
		t.Fatalf("the call returned %v only once its reply came, %v after its context was cancelled", err, time.Since(start).Round(time.Millisecond))
	}
}

// TestLanesBounded: under concurrent calls, some cancelled mid-request,
// a Locker keeps at most the client's MaxIdleConns lanes idle, so the
// server sees no more connections than that once the calls are over; and
// after Close (of the Locker, then of the client) none is left open, nor
// any goroutine.
func TestLanesBounded(t *testing.T) {
	m := testserver.StartMemcached(t, nil)
	curr := func() int {
		n, err := strconv.Atoi(stat(t, m.Addr(), "curr_connections"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := curr()
	base := leakcheck.Take()
	c := memcache.New(m.Addr())
	c.MaxIdleConns = 3
	d, lo := newDriverOptions(c, selectorOf(c), nil, false)
	l := lock.New(d, lo)
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				ctx, cancel := context.WithCancel(context.Background())
				if i%4 == 0 { // cancelled mid-request, at times
					time.AfterFunc(time.Duration(g*7+i)%300*time.Microsecond, cancel)
				}
				if le, err := l.TryLock(ctx, "bounded"+strconv.Itoa(g)); err == nil {
					_ = le.Unlock(ctx)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	// Lost-reply clean-ups may still run; the lanes settle once they end.
	deadline := time.Now().Add(10 * time.Second)
	for n := curr(); n > before+c.MaxIdleConns; n = curr() {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open after the calls; want at most %d idle lanes' (+%d before)", n-before, c.MaxIdleConns, before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline = time.Now().Add(10 * time.Second)
	for n := curr(); n > before; n = curr() {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections left open after Close", n-before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	leakcheck.Verify(t, base)
}

// TestLaneAbortDial: a call whose connection's TLS handshake gets no
// answer returns once its context is cancelled, although gomemcache's
// dial waits for the client's Timeout (a minute): abort cancels the dial
// under way. With an abort that does not, the call waits out the dial.
func TestLaneAbortDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var held []net.Conn // accepted, never answered
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	c := memcache.New(ln.Addr().String())
	c.Timeout = time.Minute
	o := &Options{TLS: &tls.Config{InsecureSkipVerify: true}}
	o.ReleaseTimeout = 300 * time.Millisecond // the lost grant's clean-up dials the silent server too
	d, lo := newDriverOptions(c, selectorOf(c), o, false)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := l.TryLock(ctx, testKey(t)); done <- err }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("TryLock: %v; want context.Canceled", err)
		}
	case <-time.After(abortBound):
		t.Fatalf("TryLock still dialling %v after its context was cancelled", abortBound)
	}
}
