package memcached

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit45DialIgnoringContext: a client whose own DialContext does
// not watch its context (a plain net.Dial behind a proxy library, a
// dialer that waits on something else) must not keep a call past its
// context's end: the driver declares ReturnsAtContextEnd, so lock runs
// the call on the caller's goroutine and has no hand-off to fall back on.
func TestAudit45DialIgnoringContext(t *testing.T) {
	srv := testserver.SharedMemcached(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	c := memcache.New(srv.Addr())
	c.Timeout = time.Minute
	c.DialContext = func(_ context.Context, network, addr string) (net.Conn, error) {
		<-release // ignores its context, as net.Dial would on a black hole
		return net.Dial(network, addr)
	}
	o := &Options{}
	o.ReleaseTimeout = 300 * time.Millisecond
	l := New(c, o)
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
		unblock()
		<-done
		t.Fatalf("TryLock still in the client's dialer %v after its context was cancelled", abortBound)
	}
	unblock()
}

// TestAudit45NoStaleGrant: a call whose add the server applied but whose
// STORED reply was held is aborted; once the reply is let go, it must
// never be read by a later call of the same Locker (a forged grant): with
// the key then held by another Locker, every TryLock of the first must be
// refused, and grants' tokens must rise.
func TestAudit45NoStaleGrant(t *testing.T) {
	srv := testserver.SharedMemcached(t)
	proxy := redistest.StartHoldingProxy(t, srv.Addr())
	c := memcache.New(proxy.Addr())
	c.Timeout = time.Minute
	c.MaxIdleConns = 1
	t.Cleanup(func() { c.Close() })
	o := &Options{}
	o.TTL = time.Minute
	l := New(c, o)
	t.Cleanup(func() { l.Close() })
	other := New(memcache.New(srv.Addr()), o)
	t.Cleanup(func() { other.Close() })
	var last uint64
	for i := range 5 {
		k := testKey(t)
		abortHeld(t, proxy, func(ctx context.Context) error { _, err := l.TryLock(ctx, k); return err })
		// The held STORED (and the incr's reply) is now sent on: to a
		// connection the abort closed.
		var le *lock.Lease
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			le, err = other.TryLock(testCtx(t), k)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the aborted grant was not cleaned up: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if le.Token() <= last {
			t.Fatalf("round %d: token %d after %d", i, le.Token(), last)
		}
		last = le.Token()
		for j := range 20 {
			mine, err := l.TryLock(testCtx(t), k)
			if err == nil {
				t.Fatalf("round %d, try %d: granted (token %d) while another Locker holds the key (token %d)", i, j, mine.Token(), le.Token())
			}
			if !errors.Is(err, lock.ErrHeld) {
				t.Fatalf("round %d, try %d: %v; want ErrHeld", i, j, err)
			}
		}
		if err := le.Unlock(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAudit45AbortAnywhere: two Lockers contend on one key, the calls of
// one cancelled at random 0-3 ms after they start (before the request,
// mid-request, after the server ran it); never two holders at once,
// tokens only rise, and the key is free at the end (lost replies cleaned
// up).
func TestAudit45AbortAnywhere(t *testing.T) {
	srv := testserver.SharedMemcached(t)
	abortAnywhere(t, func() (*memcache.Client, *Options) {
		o := &Options{}
		o.TTL = time.Minute
		return memcache.New(srv.Addr()), o
	})
}

// TestAudit45TLSAbortAnywhere: TestAudit45AbortAnywhere over TLS, where
// abort's half-close is a close_notify alert.
func TestAudit45TLSAbortAnywhere(t *testing.T) {
	m := testserver.StartMemcached(t, &testserver.MemcachedOptions{TLS: &testserver.TLSOptions{}})
	abortAnywhere(t, func() (*memcache.Client, *Options) {
		o := &Options{TLS: m.TLS.ClientConfig()}
		o.TTL = time.Minute
		return memcache.New(m.Addr()), o
	})
}

// TestAudit45SelectorAbortAnywhere: TestAudit45AbortAnywhere over two
// servers, by a ServerSelector of the user's own (a lane's client uses
// it too, reaching both).
func TestAudit45SelectorAbortAnywhere(t *testing.T) {
	m := testserver.StartMemcached(t, &testserver.MemcachedOptions{Servers: 2})
	var ss memcache.ServerList
	if err := ss.SetServers(m.Addrs()...); err != nil {
		t.Fatal(err)
	}
	abortAnywhere(t, func() (*memcache.Client, *Options) {
		o := &Options{}
		o.TTL = time.Minute
		c := memcache.NewFromSelector(userSelector{&ss})
		if selectorOf(c) == nil {
			t.Fatal("no lanes over a client with the user's selector")
		}
		return c, o
	})
}

// userSelector is a ServerSelector of the user's own.
type userSelector struct{ *memcache.ServerList }

func abortAnywhere(t *testing.T, mk func() (*memcache.Client, *Options)) {
	k := testKey(t)
	var holders atomic.Int32
	var mu sync.Mutex
	var last uint64
	var grants, aborted atomic.Int64
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for g := range 3 {
		c, o := mk()
		c.MaxIdleConns = 1
		l := New(c, o)
		defer c.Close()
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 45))
			for time.Now().Before(stop) {
				ctx, cancel := context.WithCancel(context.Background())
				if g > 0 {
					time.AfterFunc(time.Duration(r.IntN(3000))*time.Microsecond, cancel)
				}
				le, err := l.TryLock(ctx, k)
				if err != nil {
					if ctx.Err() != nil {
						aborted.Add(1)
					}
					cancel()
					time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
					continue
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d holders", n)
				}
				mu.Lock()
				if le.Token() <= last {
					t.Errorf("token %d after %d", le.Token(), last)
				}
				last = le.Token()
				mu.Unlock()
				grants.Add(1)
				time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
				holders.Add(-1)
				if err := le.Unlock(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("unlock: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants, %d aborted calls", grants.Load(), aborted.Load())
	c, o := mk()
	defer c.Close()
	l := New(c, o)
	defer l.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		le, err := l.TryLock(testCtx(t), k)
		if err == nil {
			mu.Lock()
			if le.Token() <= last {
				t.Errorf("final token %d after %d", le.Token(), last)
			}
			mu.Unlock()
			le.Unlock(testCtx(t))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key still held 10s after the calls: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAudit45ZeroClient: a *memcache.Client not made by gomemcache's
// constructors has no ServerSelector (selectorOf gives nil, no lanes);
// its calls must fail with a clear error, not panic in gomemcache.
func TestAudit45ZeroClient(t *testing.T) {
	l := New(&memcache.Client{}, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("TryLock over a zero client panicked: %v", p)
			}
		}()
		_, err = l.TryLock(ctx, "x")
	}()
	if err == nil {
		t.Fatal("TryLock over a zero client succeeded")
	}
	t.Logf("TryLock over a zero client: %v", err)
}
