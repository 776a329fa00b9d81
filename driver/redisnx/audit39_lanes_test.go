package redisnx

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/canary"
	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// cancelAfter runs call with a context cancelled after d, and fails t
// unless it returns within abortBound of the cancel; it returns call's
// error.
func cancelAfter(t *testing.T, d time.Duration, call func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	time.Sleep(d)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		return err
	case <-time.After(abortBound):
		t.Fatalf("the call returned only %v after its context was cancelled", time.Since(start))
		return nil
	}
}

// waitKey waits up to d for a key matching pattern to exist.
func waitKey(admin *redis.Client, pattern string, d time.Duration) bool {
	return eventually(d, func() bool { return len(admin.Keys(context.Background(), pattern).Val()) > 0 })
}

// TestAudit39LateCopyAfterCleanup: the request of a call cancelled
// before it reached Redis is held in the network (the proxy) while lock
// cleans up the call's unknown outcome, and delivered after that clean-up:
// the late copy must change nothing. TryLock's and Lock's grant requests
// (acquire.lua), and a queued Lock's wait.lua, each with a 1-minute TTL:
// a key left held by the late copy is seen at once.
func TestAudit39LateCopyAfterCleanup(t *testing.T) {
	admin := sharedClient(t, nil)
	proxy := startAuditProxy(t, admin.Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	l := newTestLocker(t, rdb, &Options{Options: lock.Options{TTL: time.Minute}})
	other := newTestLocker(t, admin, nil)
	ctx := tctx(t, 60*time.Second)
	warm, err := l.TryLock(ctx, testKey(t)) // scripts loaded: EVALSHA from now on
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(ctx)

	late := func(t *testing.T, k string, call func(context.Context) error) {
		t.Helper()
		lk := lockKey(DefaultPrefix, k)
		proxy.Late.Store(true)
		proxy.Gate.Store(true)
		proxy.HoldReq.Store(true)
		defer func() { proxy.HoldReq.Store(false); proxy.Gate.Store(false); proxy.Late.Store(false) }()
		if err := cancelAfter(t, 100*time.Millisecond, call); err == nil {
			t.Fatal("the call succeeded with its request held")
		}
		proxy.HoldReq.Store(false) // the clean-up goes through; the late copy waits
		if !waitKey(admin, lk+redisx.VoidInfix+"*", 10*time.Second) {
			t.Fatal("no tombstone: the clean-up did not run")
		}
		time.Sleep(50 * time.Millisecond)
		proxy.Gate.Store(false) // the late copy reaches Redis
		time.Sleep(500 * time.Millisecond)
	}
	t.Run("TryLock", func(t *testing.T) {
		k := testKey(t)
		late(t, k, func(ctx context.Context) error { _, err := l.TryLock(ctx, k); return err })
		if v := admin.Get(ctx, lockKey(DefaultPrefix, k)).Val(); v != "" {
			t.Fatalf("the late copy of an aborted TryLock holds the key: %q, PTTL %v", v, admin.PTTL(ctx, lockKey(DefaultPrefix, k)).Val())
		}
	})
	t.Run("Lock", func(t *testing.T) {
		k := testKey(t)
		late(t, k, func(ctx context.Context) error { _, err := l.Lock(ctx, k); return err })
		if v := admin.Get(ctx, lockKey(DefaultPrefix, k)).Val(); v != "" {
			t.Fatalf("the late copy of an aborted Lock holds the key: %q", v)
		}
	})
	t.Run("QueuedLock", func(t *testing.T) {
		k := testKey(t)
		lk := lockKey(DefaultPrefix, k)
		h, err := other.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		// Subscribe l to the key's channel first: a Lock then queues at once.
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _ = l.Lock(wctx, k)
		cancel()
		if !eventually(5*time.Second, func() bool { return admin.Exists(ctx, lk+queueSuffix).Val() == 0 }) {
			t.Fatal("the first wait's entry stayed")
		}
		late(t, k, func(ctx context.Context) error { _, err := l.Lock(ctx, k); return err })
		if n := admin.ZCard(ctx, lk+queueSuffix).Val(); n != 0 {
			t.Errorf("the late copy of wait.lua queued a waiter that left: %v", admin.ZRange(ctx, lk+queueSuffix, 0, -1).Val())
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if v := admin.Get(ctx, lk).Val(); v != "" {
			t.Fatalf("the release handed the key to a waiter that left: %q, PTTL %v", v, admin.PTTL(ctx, lk).Val())
		}
	})
}

// TestAudit39NoResendAfterAbort: after a call is aborted (its lane's
// connection closed) with its request held before Redis, or its reply
// held after Redis ran it, go-redis sends no copy of the request on
// another connection: the proxy counts the script's SHA in every request
// it reads, for TryLock (acquire.lua) and RefreshBatch's pipeline
// (refresh.lua), for a second after the abort.
func TestAudit39NoResendAfterAbort(t *testing.T) {
	admin := sharedClient(t, nil)
	proxy := startAuditProxy(t, admin.Options().Addr)
	// A zero backoff: a retry would not wait on the ended context.
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 5, MinRetryBackoff: -1, MaxRetryBackoff: -1})
	t.Cleanup(func() { rdb.Close() })
	l := newTestLocker(t, rdb, &Options{Options: lock.Options{TTL: time.Minute}})
	d := testDriver(rdb)
	t.Cleanup(func() { d.Close() })
	ctx := tctx(t, 60*time.Second)
	warm, err := l.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	warm.Refresh(ctx, time.Minute)
	warm.Unlock(ctx)

	for _, hold := range []string{"request", "reply"} {
		flag := &proxy.HoldReq
		if hold == "reply" {
			flag = &proxy.HoldReply
		}
		t.Run("TryLock/"+hold, func(t *testing.T) {
			k := testKey(t)
			sha := []byte(acquireScript.Hash())
			start := time.Now()
			flag.Store(true)
			_ = cancelAfter(t, 100*time.Millisecond, func(ctx context.Context) error { _, err := l.TryLock(ctx, k); return err })
			time.Sleep(time.Second)
			flag.Store(false)
			time.Sleep(200 * time.Millisecond)
			if n := proxy.Count(sha, start); n != 1 {
				t.Fatalf("acquire.lua sent %d times for one aborted TryLock", n)
			}
			if !eventually(5*time.Second, func() bool { return admin.Exists(ctx, lockKey(DefaultPrefix, k)).Val() == 0 }) {
				t.Fatal("the aborted TryLock's grant was not cleaned up")
			}
		})
		t.Run("RefreshBatch/"+hold, func(t *testing.T) {
			var ls []*driver.Lease
			for range 3 {
				le := newLease(testKey(t), randOwner(), time.Minute)
				if err := d.Acquire(ctx, le); err != nil {
					t.Fatal(err)
				}
				ls = append(ls, le)
			}
			sha := []byte(refreshScript.Hash())
			start := time.Now()
			flag.Store(true)
			_ = cancelAfter(t, 100*time.Millisecond, func(ctx context.Context) error {
				_, errs := d.RefreshBatch(ctx, ls, time.Minute)
				return errors.Join(errs...)
			})
			time.Sleep(time.Second)
			flag.Store(false)
			time.Sleep(200 * time.Millisecond)
			if n := proxy.Count(sha, start); n != 1 {
				t.Fatalf("refresh.lua sent %d times for one aborted RefreshBatch pipeline", n)
			}
			for _, le := range ls {
				d.Release(ctx, le)
			}
		})
	}
}

// witness checks, outside the locks, that no two leases of a key are
// valid at once and that each grant's token is above every earlier one.
type witness struct {
	mu      sync.Mutex
	holders map[string][]*lock.Lease
	max     map[string]uint64
	bad     []string
	grants  int
}

func newWitness() *witness {
	return &witness{holders: map[string][]*lock.Lease{}, max: map[string]uint64{}}
}

func (w *witness) enter(name string, le *lock.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	k := le.Key()
	w.grants++
	for _, o := range w.holders[k] {
		if now.Before(o.Deadline()) && o.Err() == nil {
			w.bad = append(w.bad, fmt.Sprintf("%s: %s granted token %d while token %d is valid until %v", k, name, le.Token(), o.Token(), o.Deadline().Sub(now)))
		}
	}
	if le.Token() <= w.max[k] {
		w.bad = append(w.bad, fmt.Sprintf("%s: %s granted token %d after token %d", k, name, le.Token(), w.max[k]))
	}
	w.max[k] = max(w.max[k], le.Token())
	w.holders[k] = append(w.holders[k], le)
}

func (w *witness) leave(le *lock.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	hs := w.holders[le.Key()]
	for i, o := range hs {
		if o == le {
			w.holders[le.Key()] = append(hs[:i], hs[i+1:]...)
			return
		}
	}
}

// TestAudit39RandomAborts: redisnx and rediswatch Lockers contend for two
// keys through a proxy that, at random moments, holds requests before
// Redis or replies after it (and delivers held requests of a closed
// connection late), while every call's context is cancelled at a random
// point. No two leases may be valid at once, tokens rise, and after Close
// nothing is left: no lock key or queue, every other name with a TTL, no
// connection open through the proxy, no goroutine.
func TestAudit39RandomAborts(t *testing.T) {
	dur := 8 * time.Second
	if testing.Short() {
		dur = 3 * time.Second
	}
	t.Run("plain", func(t *testing.T) {
		enoughGrants(t, func(extra time.Duration) int {
			return randomAborts(t, sharedClient(t, nil), func(addr string) *redis.Options { return &redis.Options{Addr: addr, PoolSize: 6} }, dur, extra)
		})
	})
	t.Run("tls", func(t *testing.T) {
		r := testserver.StartRedis(t, &testserver.RedisOptions{TLS: &testserver.TLSOptions{}})
		admin := redis.NewClient(&redis.Options{Addr: r.Addr(), TLSConfig: r.TLS.ClientConfig()})
		t.Cleanup(func() { admin.Close() })
		enoughGrants(t, func(extra time.Duration) int {
			return randomAborts(t, admin, func(addr string) *redis.Options {
				return &redis.Options{Addr: addr, PoolSize: 6, TLSConfig: r.TLS.ClientConfig()}
			}, dur/2, extra)
		})
	})
}

// enoughGrants runs a random-aborts run until it grants enough leases to
// have exercised the locks. Every call's context ends within 150 ms, and
// on a starved machine no call gets a connection dialled (TLS's handshake
// most of all) in that time: a meter tells such a stall from a library
// that grants nothing, and the run is made again (at most three times),
// its calls' contexts longer by the stall the meter saw, StarvedShare
// times over.
func enoughGrants(t *testing.T, run func(extra time.Duration) (grants int)) {
	var extra time.Duration
	for try := 1; ; try++ {
		m := canary.StartMeter()
		grants := run(extra)
		worst := m.End()
		extra += canary.StarvedShare * worst
		if grants >= 20 {
			return
		}
		what := fmt.Sprintf("only %d grants: the test did not exercise the locks", grants)
		if try == 3 || !canary.Stalled(t, worst, 150*time.Millisecond, what) {
			t.Error(what)
			return
		}
	}
}

// randomAborts makes the run; its calls' contexts end at random within
// 150 ms plus extra.
func randomAborts(t *testing.T, admin *redis.Client, opts func(addr string) *redis.Options, dur, extra time.Duration) (grants int) {
	base := leakcheck.Take()
	proxy := startAuditProxy(t, admin.Options().Addr)
	keys := []string{testKey(t) + "/a", testKey(t) + "/b"}
	wit := newWitness()
	var clients []*redis.Client
	var lockers []*lock.Locker
	for i := range 4 {
		c := redis.NewClient(opts(proxy.Addr()))
		clients = append(clients, c)
		o := &Options{Options: lock.Options{TTL: 2 * time.Second}}
		if i%2 == 0 {
			lockers = append(lockers, New(c, o))
		} else {
			lockers = append(lockers, rediswatch.New(c, o))
		}
	}
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Add(1)
	maxOpen := 0
	go func() { // the network's faults
		defer chaos.Done()
		for {
			maxOpen = max(maxOpen, proxy.Open())
			select {
			case <-stop:
				proxy.HoldReq.Store(false)
				proxy.HoldReply.Store(false)
				return
			case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond):
			}
			proxy.Late.Store(rand.IntN(2) == 0)
			switch rand.IntN(5) {
			case 0:
				proxy.HoldReq.Store(true)
			case 1:
				proxy.HoldReply.Store(true)
			}
			time.Sleep(time.Duration(5+rand.IntN(40)) * time.Millisecond)
			proxy.HoldReq.Store(false)
			proxy.HoldReply.Store(false)
		}
	}()
	rctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Millisecond+rand.N(150*time.Millisecond+extra))
	}
	var wg sync.WaitGroup
	for i, l := range lockers {
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("locker %d/%d", i, g)
				for end := time.Now().Add(dur); time.Now().Before(end); {
					k := keys[rand.IntN(len(keys))]
					ctx, cancel := rctx()
					var le *lock.Lease
					var err error
					if rand.IntN(3) == 0 {
						le, err = l.TryLock(ctx, k)
					} else {
						le, err = l.Lock(ctx, k)
					}
					cancel()
					if err != nil {
						continue
					}
					wit.enter(name, le)
					time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
					if rand.IntN(2) == 0 {
						ctx, cancel := rctx()
						_ = le.Refresh(ctx, 2*time.Second)
						cancel()
					}
					wit.leave(le)
					ctx, cancel = rctx()
					_ = le.Unlock(ctx)
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	chaos.Wait()
	for _, l := range lockers {
		if err := l.Close(); err != nil {
			t.Logf("Close: %v", err)
		}
	}
	t.Logf("%d grants; at most %d connections open at once", wit.grants, maxOpen)
	// Per Locker: its lanes and its client's pool (6 each), its
	// subscription, and a few being closed.
	if maxOpen > 4*(6+6+1)+8 {
		t.Errorf("%d connections open at once: the lanes are not bounded by the pool size", maxOpen)
	}
	for _, b := range wit.bad {
		t.Error(b)
	}
	ctx := tctx(t, 30*time.Second)
	for _, k := range keys {
		lk := lockKey(DefaultPrefix, k)
		if !eventually(10*time.Second, func() bool {
			return admin.Exists(ctx, lk, lk+queueSuffix, lk+entriesSuffix).Val() == 0
		}) {
			t.Errorf("%s: left after Close: lock %q (PTTL %v), queue %v, entries %v", k, admin.Get(ctx, lk).Val(),
				admin.PTTL(ctx, lk).Val(), admin.ZRange(ctx, lk+queueSuffix, 0, -1).Val(), admin.HGetAll(ctx, lk+entriesSuffix).Val())
		}
		for _, n := range admin.Keys(ctx, strings.ReplaceAll(lk, "{", "\\{")+"*").Val() {
			if p := admin.PTTL(ctx, n).Val(); p < 0 && admin.Exists(ctx, n).Val() == 1 {
				t.Errorf("%s left with no TTL (%v)", n, p)
			}
		}
	}
	for _, c := range clients {
		c.Close()
	}
	if !eventually(5*time.Second, func() bool { return proxy.Open() == 0 }) {
		t.Errorf("%d connections still open through the proxy after every Locker and client closed", proxy.Open())
	}
	leakcheck.Verify(t, base, leakcheck.Ignore("github.com/dlock-go/dlock/driver/redisnx.(*auditProxy).accept"),
		leakcheck.Ignore("github.com/dlock-go/dlock/driver/redisnx.(*auditProxy).requests"),
		leakcheck.Ignore("github.com/dlock-go/dlock/driver/redisnx.(*auditProxy).requests.func1"),
		leakcheck.Ignore("github.com/dlock-go/dlock/driver/redisnx.(*auditProxy).requests.func2"),
		leakcheck.Ignore("github.com/dlock-go/dlock/driver/redisnx.(*auditProxy).replies"))
	return wit.grants
}
