package redisnx

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

func rw(t *testing.T, l *lock.Locker) *lock.Locker {
	t.Helper()
	if err := l.Supports(lock.SharedLeases); err != nil {
		t.Fatalf("a redisnx Locker has no shared leases: %v", err)
	}
	return l
}

// A plain SET NX PX lock on the key (redsync's, redislock's) excludes
// dlock's readers and writers, and readers exclude it: the lock key exists
// while any reader holds its share.
func TestSharedPlainSetNXInterop(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		l := rw(t, newTestLocker(t, c, nil))
		k := testKey(t)
		rk := lockKey(DefaultPrefix, k)
		ctx := tctx(t, 10*time.Second)
		if ok, err := c.SetNX(ctx, rk, "redsync-token", 30*time.Second).Result(); err != nil || !ok {
			t.Fatalf("SET NX PX by the plain locker: ok=%v err=%v", ok, err)
		}
		if _, err := l.TryRLock(ctx, k); !isNotAcquired(err) {
			t.Errorf("TryRLock while a plain SET NX lock holds the key: err = %v, want ErrNotAcquired", err)
		}
		if _, err := l.TryLock(ctx, k); !isNotAcquired(err) {
			t.Errorf("TryLock while a plain SET NX lock holds the key: err = %v, want ErrNotAcquired", err)
		}
		c.Del(ctx, rk)
		r1, err := l.TryRLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := l.TryRLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.SetNX(ctx, rk, "redsync-token", 30*time.Second).Result(); err != nil || ok {
			t.Errorf("SET NX PX while two readers hold the key: ok=%v err=%v, want refused", ok, err)
		}
		r1.Unlock(ctx)
		if ok, err := c.SetNX(ctx, rk, "redsync-token", 30*time.Second).Result(); err != nil || ok {
			t.Errorf("SET NX PX while one reader holds the key: ok=%v err=%v, want refused", ok, err)
		}
		if err := r2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := c.SetNX(ctx, rk, "redsync-token", 30*time.Second).Result(); err != nil || !ok {
			t.Errorf("SET NX PX after the readers left: ok=%v err=%v", ok, err)
		}
		c.Del(ctx, rk)
	})
}

// A reader that crashed keeps its share until its own TTL: the writer
// waiting for it gets the key then, not before, and not long after (the
// lock key's expiry follows the readers').
func TestSharedCrashedReaderFreesItsShare(t *testing.T) {
	c := sharedClient(t, nil)
	l := rw(t, newTestLocker(t, c, nil))
	k := testKey(t)
	ctx := tctx(t, 20*time.Second)
	const ttl = 1500 * time.Millisecond
	crashed, err := l.TryRLock(ctx, k, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	_ = crashed // never released, never renewed
	long, err := l.TryRLock(ctx, k, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Unlock(ctx); err != nil { // the lock key stays for the crashed one
		t.Fatal(err)
	}
	start := time.Now()
	w, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if waited < ttl-300*time.Millisecond || waited > ttl+1500*time.Millisecond {
		t.Errorf("writer waited %v for a crashed reader whose TTL was %v", waited, ttl)
	}
	if w.Token() <= long.Token() {
		t.Errorf("writer's token %d not above the readers' (%d)", w.Token(), long.Token())
	}
	w.Unlock(ctx)
}

// When a writer releases, every reader queued in a row behind it gets the
// key in the same release, each with its own increasing token, and the
// writer queued after them waits for them all.
func TestSharedReadersHandedOverTogether(t *testing.T) {
	c := sharedClient(t, nil)
	lockers := make([]*lock.Locker, 4)
	for i := range lockers {
		lockers[i] = rw(t, newTestLocker(t, c, nil))
	}
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	ctx := tctx(t, 20*time.Second)
	w, err := lockers[0].Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	grants := make(chan grant, 3)
	queueWaiter(t, c, lk, 1, grants, "reader 1", func() (*lock.Lease, error) { return lockers[1].RLock(ctx, k) })
	queueWaiter(t, c, lk, 2, grants, "reader 2", func() (*lock.Lease, error) { return lockers[2].RLock(ctx, k) })
	queueWaiter(t, c, lk, 3, grants, "writer", func() (*lock.Lease, error) { return lockers[3].Lock(ctx, k) })
	time.Sleep(20 * time.Millisecond)
	released := time.Now()
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r1, r2 := <-grants, <-grants
	if r1.who == "writer" || r2.who == "writer" {
		t.Fatalf("the writer queued after the readers got the key first")
	}
	for _, r := range []grant{r1, r2} {
		if d := r.at.Sub(released); d > 500*time.Millisecond {
			t.Errorf("%s granted %v after the release; want both at once", r.who, d)
		}
		if r.lease.Token() <= w.Token() {
			t.Errorf("%s token %d not above the writer's %d", r.who, r.lease.Token(), w.Token())
		}
	}
	if r1.lease.Token() == r2.lease.Token() {
		t.Errorf("the two readers share token %d", r1.lease.Token())
	}
	select {
	case g := <-grants:
		t.Fatalf("%s granted while the readers hold the key", g.who)
	case <-time.After(200 * time.Millisecond):
	}
	r1.lease.Unlock(ctx)
	r2.lease.Unlock(ctx)
	g := <-grants
	if g.who != "writer" || g.lease.Token() <= max(r1.lease.Token(), r2.lease.Token()) {
		t.Errorf("%s granted with token %d after the readers (%d, %d)", g.who, g.lease.Token(), r1.lease.Token(), r2.lease.Token())
	}
	g.lease.Unlock(ctx)
	if n := c.Exists(ctx, lk, lk+readersSuffix, lk+queueSuffix).Val(); n != 0 {
		t.Errorf("%d of the lock key, readers set and queue left", n)
	}
}

// Renewal keeps a reader's share (batched with exclusive leases), and a
// reader's Refresh of a share that expired finds it gone.
func TestSharedRefresh(t *testing.T) {
	c := sharedClient(t, nil)
	l := rw(t, newTestLocker(t, c, nil))
	k, k2 := testKey(t), testKey(t)
	ctx := tctx(t, 20*time.Second)
	r, err := l.RLock(ctx, k, lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	x, err := l.Lock(ctx, k2, lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	for _, lease := range []*lock.Lease{r, x} {
		select {
		case <-lease.Done():
			t.Fatalf("lease on %q lost while renewed: %v", lease.Key(), lease.Err())
		default:
		}
	}
	if _, err := l.TryLock(ctx, k); !isNotAcquired(err) {
		t.Errorf("writer got the key of a renewed reader: %v", err)
	}
	r.Unlock(ctx)
	x.Unlock(ctx)
	short, err := l.TryRLock(ctx, k, lock.WithTTL(300*time.Millisecond), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := short.Refresh(ctx, time.Second); err == nil {
		t.Errorf("Refresh of an expired share succeeded")
	}
}
