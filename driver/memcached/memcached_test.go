package memcached

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

var testSeq atomic.Int64

func testKey(t *testing.T) string {
	return fmt.Sprintf("dlock-test/%s/%d/%d", t.Name(), time.Now().UnixNano(), testSeq.Add(1))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sharedClient(t *testing.T) *memcache.Client {
	c := memcache.New(testserver.SharedMemcached(t).Addrs()...)
	t.Cleanup(func() { c.Close() })
	return c
}

func owner(i int) string { return fmt.Sprintf("%032x", i) }

// The primitive the driver's release rests on: a cas with expiration -1
// deletes the item at once, and a cas with a stale CAS id changes nothing.
func TestCASNegativeExpirationDeletes(t *testing.T) {
	c := sharedClient(t)
	k := mapKey(DefaultPrefix, testKey(t)).lock
	if err := c.Add(&memcache.Item{Key: k, Value: []byte("mine"), Expiration: 60}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	stale := *it
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("theirs"), Expiration: 60}); err != nil {
		t.Fatal(err)
	}
	stale.Expiration = -1
	if err := c.CompareAndSwap(&stale); !errors.Is(err, memcache.ErrCASConflict) {
		t.Fatalf("cas with a stale CAS id: err = %v, want ErrCASConflict", err)
	}
	it, err = c.Get(k)
	if err != nil || string(it.Value) != "theirs" {
		t.Fatalf("after a lost cas: item %v, err %v; want the other owner's item intact", it, err)
	}
	it.Expiration = -1
	if err := c.CompareAndSwap(it); err != nil {
		t.Fatalf("cas with expiration -1: %v", err)
	}
	if _, err := c.Get(k); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("get after cas with expiration -1: err = %v, want a miss", err)
	}
	if err := c.Add(&memcache.Item{Key: k, Value: []byte("next"), Expiration: 60}); err != nil {
		t.Fatalf("add after cas with expiration -1: %v", err)
	}
	c.Delete(k)
}

// A release racing with another owner's overwrite never deletes the other
// owner's grant, whatever the interleaving.
func TestReleaseRaceLeavesOtherOwner(t *testing.T) {
	c := sharedClient(t)
	d, _ := newDriverOptions(c, selectorOf(c), nil, false)
	ctx := testCtx(t)
	for i := range 200 {
		l := &driver.Lease{Key: testKey(t), Owner: owner(i), TTL: 10 * time.Second}
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		k := d.keys(l.Key).lock
		var wg sync.WaitGroup
		var relErr error
		wg.Add(2)
		go func() { defer wg.Done(); relErr = d.Release(ctx, l) }()
		go func() {
			defer wg.Done()
			if err := c.Set(&memcache.Item{Key: k, Value: []byte("intruder"), Expiration: 60}); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		if relErr != nil && !errors.Is(relErr, driver.ErrNotHeld) {
			t.Fatalf("Release: %v", relErr)
		}
		it, err := c.Get(k)
		if err != nil || string(it.Value) != "intruder" {
			t.Fatalf("round %d: the other owner's item is gone (release err %v): item %v, err %v", i, relErr, it, err)
		}
		c.Delete(k)
	}
}

// Concurrent refreshes of one lease (lock may run two, a Refresh call and
// a renewal) succeed: a cas lost to the other refresh is retried while the
// item is still the caller's.
func TestConcurrentRefreshes(t *testing.T) {
	c := sharedClient(t)
	d, _ := newDriverOptions(c, selectorOf(c), nil, false)
	ctx := testCtx(t)
	l := &driver.Lease{Key: testKey(t), Owner: owner(1), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, l); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				if _, err := d.Refresh(ctx, l, 10*time.Second); err != nil {
					t.Errorf("Refresh: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := d.Release(ctx, l); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Memcached's clock counts whole seconds and ticks late: the reported
// Validity (whole seconds less 2 s) must pass, counted from before the
// grant request, before another client can take the key; and the key must
// be free within its TTL plus a second. Trials are staggered over a second
// to meet the server's tick at different phases.
func TestGrantOutlivesValidity(t *testing.T) {
	c := sharedClient(t)
	c.MaxIdleConns = 32
	d, _ := newDriverOptions(c, selectorOf(c), nil, false)
	ctx := testCtx(t)
	const trials = 8
	var wg sync.WaitGroup
	for i := range trials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * time.Second / trials)
			ttl := []time.Duration{MinTTL, 3500 * time.Millisecond}[i%2]
			a := &driver.Lease{Key: testKey(t), Owner: owner(1), TTL: ttl}
			t0 := time.Now()
			if err := d.Acquire(ctx, a); err != nil {
				t.Error(err)
				return
			}
			if want := validity(int32((ttl + time.Second - 1) / time.Second)); a.Validity != want || a.Validity < time.Second {
				t.Errorf("Validity = %v, want %v", a.Validity, want)
			}
			b := &driver.Lease{Key: a.Key, Owner: owner(2), TTL: ttl}
			for {
				err := d.Acquire(ctx, b)
				now := time.Now()
				if err == nil {
					if now.Before(t0.Add(a.Validity)) {
						t.Errorf("TTL %v: key taken over %v after the grant request, before its Validity %v", ttl, now.Sub(t0), a.Validity)
					}
					if now.After(t0.Add(ttl + time.Second)) {
						t.Errorf("TTL %v: key free only %v after the grant request", ttl, now.Sub(t0))
					}
					t.Logf("TTL %v, Validity %v: taken over after %v", ttl, a.Validity, now.Sub(t0))
					d.Release(ctx, b)
					return
				}
				if !errors.Is(err, driver.ErrHeld) {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// Without -M, memcached evicts items when memory runs out, lock items
// included. The holder's next refresh finds the grant gone and the lease
// ends with ErrLost, before anyone could be granted the key.
func TestEvictionDetected(t *testing.T) {
	srv := testserver.StartMemcached(t, &testserver.MemcachedOptions{MemoryMB: 4})
	srv.RequireFaults(t)
	c := memcache.New(srv.Addr())
	t.Cleanup(func() { c.Close() })
	const ttl = 9 * time.Second // renewed every 3 s
	l := New(c, &Options{Options: lock.Options{TTL: ttl}})
	defer l.Close()
	ctx := testCtx(t)
	k := testKey(t)
	lease, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	filled := time.Now()
	fill(t, srv.Addr(), len(mapKey(DefaultPrefix, k).lock), 100_000)
	if n := stat(t, srv.Addr(), "evictions"); n == "0" {
		t.Fatalf("no eviction after filling the server")
	}
	select {
	case <-lease.Done():
	case <-time.After(ttl/3 + time.Second):
		t.Fatalf("lease still held %v after its grant was evicted", time.Since(filled))
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("Err() = %v, want ErrLost", lease.Err())
	}
	t.Logf("eviction detected %v after the fill began: %v", time.Since(filled), lease.Err())
}

// With -M memcached refuses stores when full instead of evicting: the
// grant survives the same fill and the key stays held.
func TestNoEvictKeepsGrant(t *testing.T) {
	srv := testserver.StartMemcached(t, &testserver.MemcachedOptions{MemoryMB: 4, NoEvict: true})
	srv.RequireFaults(t)
	c := memcache.New(srv.Addr())
	t.Cleanup(func() { c.Close() })
	l := New(c, &Options{Options: lock.Options{TTL: 9 * time.Second}})
	defer l.Close()
	ctx := testCtx(t)
	k := testKey(t)
	lease, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, srv.Addr(), len(mapKey(DefaultPrefix, k).lock), 100_000)
	if n := stat(t, srv.Addr(), "evictions"); n != "0" {
		t.Fatalf("%s evictions with -M", n)
	}
	it, err := c.Get(mapKey(DefaultPrefix, k).lock)
	if err != nil {
		t.Fatalf("grant gone after the fill: %v", err)
	}
	if string(it.Value) == "" {
		t.Fatalf("grant has no owner")
	}
	other := New(c, nil)
	defer other.Close()
	if _, err := other.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock by another Locker: err = %v, want ErrNotAcquired", err)
	}
	select {
	case <-lease.Done():
		t.Fatalf("lease ended: %v", lease.Err())
	default:
	}
}

// fill stores n junk items whose keys are keyLen bytes and whose values are
// as long as an owner token, so that they share the lock item's slab
// class, pipelined with noreply.
func fill(t *testing.T, addr string, keyLen, n int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	value := strings.Repeat("j", 32)
	done := make(chan error, 1)
	go func() { // drain whatever the server says (out-of-memory errors with -M)
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				done <- err
				return
			}
			if strings.HasPrefix(line, "VERSION") {
				done <- nil
				return
			}
		}
	}()
	w := bufio.NewWriterSize(conn, 1<<16)
	for i := range n {
		fmt.Fprintf(w, "set %s 0 0 %d noreply\r\n%s\r\n", fmt.Sprintf("junk:%0*d", keyLen-5, i), len(value), value)
	}
	fmt.Fprintf(w, "version\r\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// stat returns one of memcached's general statistics.
func stat(t *testing.T, addr, name string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "stats\r\n")
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "END\r\n" {
			t.Fatalf("no statistic %q", name)
		}
		if v, ok := strings.CutPrefix(line, "STAT "+name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
}

// After a restart without persistence, the counter is gone; the next token
// is seeded from the clock and still greater than the last.
func TestFencingAfterRestart(t *testing.T) {
	srv := testserver.StartMemcached(t, nil)
	srv.RequireFaults(t)
	c := memcache.New(srv.Addr())
	t.Cleanup(func() { c.Close() })
	l := New(c, nil)
	defer l.Close()
	ctx := testCtx(t)
	k := testKey(t)
	var last uint64
	for range 3 {
		lease, err := l.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Token()
		lease.Unlock(ctx)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	c.Close() // drop the connections to the dead process
	lease, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	if lease.Token() <= last {
		t.Fatalf("token after restart %d is not greater than %d", lease.Token(), last)
	}
}

// With two servers, each lock and its counter live on one server.
func TestCounterOnLockServer(t *testing.T) {
	srv := testserver.StartMemcached(t, &testserver.MemcachedOptions{Servers: 2})
	addrs := srv.Addrs()
	c := memcache.New(addrs...)
	t.Cleanup(func() { c.Close() })
	l := New(c, nil)
	defer l.Close()
	var per [2]*memcache.Client
	for i := range per {
		per[i] = memcache.New(addrs[i])
		t.Cleanup(func() { per[i].Close() })
	}
	ctx := testCtx(t)
	on := [2]int{}
	for i := range 40 {
		k := testKey(t)
		if i%4 == 0 {
			k += " with a space, hashed"
		}
		lease, err := l.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		ks := mapKey(DefaultPrefix, k)
		for s, pc := range per {
			_, errLock := pc.Get(ks.lock)
			_, errCounter := pc.Get(ks.counter)
			if (errLock == nil) != (errCounter == nil) {
				t.Errorf("key %q on server %d: lock err %v, counter err %v; want both or neither", k, s, errLock, errCounter)
			}
			if errLock == nil {
				on[s]++
			}
		}
		lease.Unlock(ctx)
	}
	if on[0] == 0 || on[1] == 0 {
		t.Errorf("locks per server %v: want both servers used", on)
	}
}

// New's Locker leaves the caller's client and its connections open: the
// connection the client pooled before New (the Locker's calls run on lanes
// of their own, which it closes, lanes.go).
func TestNewLeavesClientOpen(t *testing.T) {
	var closed atomic.Int32
	var callers atomic.Bool // the client's own dials, before New
	callers.Store(true)
	c := memcache.New(testserver.SharedMemcached(t).Addr())
	c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil || !callers.Load() {
			return conn, err
		}
		return &closeCounter{Conn: conn, n: &closed}, nil
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Get(testKey(t)); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatal(err)
	}
	callers.Store(false)
	l := New(c, nil)
	ctx := testCtx(t)
	lease, err := l.Lock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = lease
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := closed.Load(); n != 0 {
		t.Errorf("Close of New's Locker closed %d of the caller's connections", n)
	}
	var got *memcache.Client
	if !l.As(&got) || got != c {
		t.Errorf("lock.As did not give the caller's client")
	}
}

type closeCounter struct {
	net.Conn
	n *atomic.Int32
}

func (c *closeCounter) Close() error { c.n.Add(1); return c.Conn.Close() }

// Open makes a Locker with its own client, configured from the URL.
func TestOpen(t *testing.T) {
	addr := testserver.SharedMemcached(t).Addr()
	ctx := testCtx(t)
	l, err := lock.Open(ctx, "memcached://"+addr+"?prefix=app:&timeout=2s&ttl=7s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var c *memcache.Client
	if !l.As(&c) || c.Timeout != 2*time.Second {
		t.Fatalf("lock.As: client %v", c)
	}
	k := testKey(t)
	lease, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != 7*time.Second {
		t.Errorf("TTL = %v, want 7s from the URL", lease.TTL())
	}
	if _, err := c.Get(mapKey("app:", k).lock); err != nil {
		t.Errorf("grant not under the URL's prefix: %v", err)
	}
	lease.Unlock(ctx)
}

// Finding 13: a key locked once does not keep its fencing counter until
// it is evicted: the counter expires counterLife after it was made (asked
// with the meta command mg, which gomemcache does not speak).
func TestFencingCounterExpires(t *testing.T) {
	srv := testserver.StartMemcached(t, nil)
	c := memcache.New(srv.Addrs()...)
	t.Cleanup(func() { c.Close() })
	l := New(c, nil)
	defer l.Close()
	ctx := testCtx(t)
	k := testKey(t)
	lease, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	conn, err := net.DialTimeout("tcp", srv.Addrs()[0], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "mg %s t\r\n", mapKey(DefaultPrefix, k).counter)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var left int
	if _, err := fmt.Sscanf(line, "HD t%d", &left); err != nil {
		t.Fatalf("mg counter t: %q: %v", line, err)
	}
	if left <= counterLife-60 || left > counterLife {
		t.Errorf("fencing counter expires in %ds; want about %ds", left, counterLife)
	}
}
