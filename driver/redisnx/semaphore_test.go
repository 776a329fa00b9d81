package redisnx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

func sem(t testing.TB, l *lock.Locker) *lock.Locker {
	t.Helper()
	s := l
	err := s.Supports(lock.Permits)
	if err != nil {
		t.Fatalf("a redisnx Locker grants no permits: %v", err)
	}
	return s
}

// semLockers returns n Lockers over c, checked to grant permits, closed at cleanup.
func semLockers(t testing.TB, c redis.UniversalClient, n int) []*lock.Locker {
	ls := make([]*lock.Locker, n)
	for i := range ls {
		ls[i] = sem(t, newTestLocker(t, c, nil))
	}
	return ls
}

// permitOwner is the owner token of a permit, read from its handle
// ("dlock1.pN.OWNER.TOKEN.KEY").
func permitOwner(t testing.TB, p *lock.Lease) string {
	t.Helper()
	parts := strings.Split(p.Handle(), ".")
	if len(parts) < 3 || !strings.HasPrefix(parts[1], "p") {
		t.Fatalf("handle %q is not a permit's", p.Handle())
	}
	return parts[2]
}

// permitState is the lock key's value and the owners in the permits set.
func permitState(t testing.TB, c redis.UniversalClient, lk string) (string, []string) {
	t.Helper()
	ctx := tctx(t, 5*time.Second)
	v, err := c.Get(ctx, lk).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET: %v", err)
	}
	owners, err := c.ZRange(ctx, lk+permitsSuffix, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE: %v", err)
	}
	return v, owners
}

// assertNoNames fails if any of the key's lock, permits, queue or entries
// keys exists.
func assertNoNames(t testing.TB, c redis.UniversalClient, lk string) {
	t.Helper()
	ctx := tctx(t, 5*time.Second)
	for _, k := range []string{lk, lk + permitsSuffix, lk + queueSuffix, lk + entriesSuffix, lk + readersSuffix} {
		if n := c.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s left behind", k)
		}
	}
}

type grant struct {
	who   string
	lease *lock.Lease
	at    time.Time
}

// queueWaiter starts f (a blocking Lock or Acquire) as who and waits until
// the queue of lk holds n waiters; the grant is sent on grants.
func queueWaiter(t *testing.T, c redis.UniversalClient, lk string, n int64, grants chan<- grant, who string, f func() (*lock.Lease, error)) {
	t.Helper()
	go func() {
		lease, err := f()
		if err != nil {
			t.Errorf("%s: %v", who, err)
			return
		}
		grants <- grant{who, lease, time.Now()}
	}()
	waitQueued(t, c, lk, n)
}

// noGrantWithin fails if a grant comes within d.
func noGrantWithin(t *testing.T, grants <-chan grant, d time.Duration, why string) {
	t.Helper()
	select {
	case g := <-grants:
		t.Fatalf("%s granted %s", g.who, why)
	case <-time.After(d):
	}
}

func nextGrant(t *testing.T, grants <-chan grant, d time.Duration) grant {
	t.Helper()
	select {
	case g := <-grants:
		return g
	case <-time.After(d):
		t.Fatalf("no grant within %v", d)
	}
	panic("unreachable")
}

// When a writer releases, the permit waiters queued in a row at the head
// get the key in the same release, each with its own increasing token, up
// to the limit; a permit returned while others are held goes to the next
// permit waiter at once; and the writer queued behind them gets the key
// when the last permit goes.
func TestSemaphoreHandOverInRow(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		const limit = 3
		ls := semLockers(t, c, 6)
		k := testKey(t)
		lk := lockKey(DefaultPrefix, k)
		ctx := tctx(t, 30*time.Second)
		x, err := ls[0].Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		grants := make(chan grant, 5)
		for i := 1; i <= 4; i++ {
			queueWaiter(t, c, lk, int64(i), grants, fmt.Sprintf("permit %d", i), func() (*lock.Lease, error) { return ls[i].Acquire(ctx, k, limit) })
		}
		queueWaiter(t, c, lk, 5, grants, "writer", func() (*lock.Lease, error) { return ls[5].Lock(ctx, k) })

		released := time.Now()
		if err := x.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]grant{}
		last := x.Token()
		for range limit {
			g := nextGrant(t, grants, 5*time.Second)
			got[g.who] = g
			if d := g.at.Sub(released); d > 500*time.Millisecond {
				t.Errorf("%s granted %v after the release; want all at once", g.who, d)
			}
			if g.lease.Token() <= x.Token() {
				t.Errorf("%s token %d not above the writer's %d", g.who, g.lease.Token(), x.Token())
			}
			last = max(last, g.lease.Token())
		}
		noGrantWithin(t, grants, 200*time.Millisecond, "beyond the limit")
		for _, who := range []string{"permit 1", "permit 2", "permit 3"} {
			if _, ok := got[who]; !ok {
				t.Fatalf("%s not granted: want the first three permit waiters", who)
			}
		}
		if got["permit 1"].lease.Token() == got["permit 2"].lease.Token() || got["permit 2"].lease.Token() == got["permit 3"].lease.Token() {
			t.Errorf("permits share a token")
		}
		if v, owners := permitState(t, c, lk); v != redisx.PermitsValue(limit) || len(owners) != limit {
			t.Errorf("lock key %q, %d permits; want %q and %d", v, len(owners), redisx.PermitsValue(limit), limit)
		}

		// A permit returned while two stay goes to the fourth waiter.
		released = time.Now()
		if err := got["permit 2"].lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		g := nextGrant(t, grants, 5*time.Second)
		if g.who != "permit 4" {
			t.Fatalf("%s got the returned permit; want permit 4", g.who)
		}
		if d := g.at.Sub(released); d > 500*time.Millisecond {
			t.Errorf("permit 4 granted %v after a permit was returned", d)
		}
		if g.lease.Token() <= last {
			t.Errorf("permit 4 token %d not above the earlier permits' %d", g.lease.Token(), last)
		}
		last = g.lease.Token()
		got["permit 4"] = g
		noGrantWithin(t, grants, 200*time.Millisecond, "while permits are held")
		for _, who := range []string{"permit 1", "permit 3", "permit 4"} {
			if err := got[who].lease.Unlock(ctx); err != nil {
				t.Fatalf("Unlock of %s: %v", who, err)
			}
		}
		w := nextGrant(t, grants, 5*time.Second)
		if w.who != "writer" || w.lease.Token() <= last {
			t.Errorf("%s granted with token %d after the permits (last %d)", w.who, w.lease.Token(), last)
		}
		if err := w.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoNames(t, c, lk)
	})
}

// A writer queued behind permits is not passed by later permits, neither a
// TryAcquire nor a blocking Acquire, though a permit is free.
func TestSemaphoreWriterNotPassed(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		const limit = 2
		ls := semLockers(t, c, 3)
		k := testKey(t)
		lk := lockKey(DefaultPrefix, k)
		ctx := tctx(t, 30*time.Second)
		p, err := ls[0].TryAcquire(ctx, k, limit)
		if err != nil {
			t.Fatal(err)
		}
		grants := make(chan grant, 2)
		queueWaiter(t, c, lk, 1, grants, "writer", func() (*lock.Lease, error) { return ls[1].Lock(ctx, k) })
		if _, err := ls[2].TryAcquire(ctx, k, limit); !isNotAcquired(err) {
			t.Fatalf("TryAcquire with a permit free but a writer queued: err = %v, want ErrNotAcquired", err)
		}
		queueWaiter(t, c, lk, 2, grants, "permit", func() (*lock.Lease, error) { return ls[2].Acquire(ctx, k, limit) })
		noGrantWithin(t, grants, 300*time.Millisecond, "while the first permit is held")
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		w := nextGrant(t, grants, 5*time.Second)
		if w.who != "writer" {
			t.Fatalf("the %s queued after the writer got the key first", w.who)
		}
		noGrantWithin(t, grants, 200*time.Millisecond, "while the writer holds the key")
		if err := w.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		g := nextGrant(t, grants, 5*time.Second)
		if g.lease.Token() <= w.lease.Token() {
			t.Errorf("permit token %d not above the writer's %d", g.lease.Token(), w.lease.Token())
		}
		if err := g.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		assertNoNames(t, c, lk)
	})
}

// A plain SET NX PX lock on the key (redsync's, redislock's) is refused
// while any permit is held, and the lock key lives as long as the longest
// permit, no longer; permits are refused while such a lock holds the key.
func TestSemaphorePlainSetNXInterop(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		l := sem(t, newTestLocker(t, c, nil))
		k := testKey(t)
		lk := lockKey(DefaultPrefix, k)
		ctx := tctx(t, 10*time.Second)
		setNX := func() bool {
			ok, err := c.SetNX(ctx, lk, "redsync-token", 30*time.Second).Result()
			if err != nil {
				t.Fatalf("SET NX PX: %v", err)
			}
			return ok
		}

		long, err := l.TryAcquire(ctx, k, 2, lock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		short, err := l.TryAcquire(ctx, k, 2, lock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if setNX() {
			t.Fatalf("SET NX PX while two permits are held: granted")
		}
		if v, _ := permitState(t, c, lk); v != "S2" {
			t.Errorf("lock key %q while permits of 2 are held, want \"S2\"", v)
		}
		if pttl := c.PTTL(ctx, lk).Val(); pttl < 25*time.Second {
			t.Errorf("lock key PTTL %v; want the longest permit's, about 30s", pttl)
		}
		if err := long.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if setNX() {
			t.Fatalf("SET NX PX while one permit is held: granted")
		}
		if pttl := c.PTTL(ctx, lk).Val(); pttl > 10*time.Second+50*time.Millisecond || pttl < 5*time.Second { // release.lua adds 1 ms
			t.Errorf("lock key PTTL %v after the longest permit left; want the one left's, about 10s", pttl)
		}
		if err := short.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if !setNX() {
			t.Fatalf("SET NX PX after the permits were returned: refused")
		}
		if _, err := l.TryAcquire(ctx, k, 2); !isNotAcquired(err) {
			t.Errorf("TryAcquire while a plain SET NX lock holds the key: err = %v, want ErrNotAcquired", err)
		}
		if v := c.Get(ctx, lk).Val(); v != "redsync-token" {
			t.Errorf("plain lock value %q after the refused TryAcquire", v)
		}
		c.Del(ctx, lk)
		p, err := l.TryAcquire(ctx, k, 2)
		if err != nil {
			t.Fatalf("TryAcquire after the plain lock was released: %v", err)
		}
		p.Unlock(ctx)
		assertNoNames(t, c, lk)
	})
}

// A crashed holder's permit returns after its own TTL, not before, while
// the other permit is kept by its renewals: the waiter for it is granted
// then, and the lock key stays a semaphore's.
func TestSemaphoreCrashedPermitExpires(t *testing.T) {
	c := sharedClient(t, nil)
	l := sem(t, newTestLocker(t, c, nil))
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	ctx := tctx(t, 20*time.Second)
	const ttl = 1500 * time.Millisecond
	crashed, err := l.TryAcquire(ctx, k, 2, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	gone := permitOwner(t, crashed) // never released, never renewed
	stays, err := l.TryAcquire(ctx, k, 2, lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, k, 2); !isNotAcquired(err) {
		t.Fatalf("a third permit of two: err = %v, want ErrNotAcquired", err)
	}
	start := time.Now()
	p, err := l.Acquire(ctx, k, 2)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if waited < ttl-300*time.Millisecond || waited > ttl+1500*time.Millisecond {
		t.Errorf("waited %v for a crashed holder's permit whose TTL was %v", waited, ttl)
	}
	if err := stays.Err(); err != nil {
		t.Errorf("the renewed permit was lost: %v", err)
	}
	v, owners := permitState(t, c, lk)
	if v != "S2" || len(owners) != 2 || owners[0] == gone || owners[1] == gone {
		t.Errorf("lock key %q, permits %v; want \"S2\" and two permits without the crashed one's, %s", v, owners, gone)
	}
	if p.Token() <= stays.Token() {
		t.Errorf("token %d of the permit taken again not above %d", p.Token(), stays.Token())
	}
	for _, q := range []*lock.Lease{p, stays} {
		if err := q.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	assertNoNames(t, c, lk)
}

// A permit grant whose reply never came (the server stalled past the
// client's read timeout, or the caller gave up) is removed by owner, alone
// or beside another holder's permit, whatever order the server runs the
// queued grant and its clean-up in: only the other holder's permit is
// left, or nothing.
func TestSemaphoreLostGrantReply(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cancel, beside bool
	}{{"timeout", false, false}, {"cancelled", true, false}, {"beside/timeout", false, true}, {"beside/cancelled", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c, raw := stallable(t)
			l := sem(t, newTestLocker(t, c, &Options{Options: lockOpts(time.Minute)}))
			other := sem(t, newTestLocker(t, raw, nil))
			k := testKey(t)
			lk := lockKey(DefaultPrefix, k)
			// Load the scripts, so that the grant is one EVALSHA.
			if p, err := l.TryAcquire(tctx(t, 10*time.Second), k, 2); err != nil {
				t.Fatalf("TryAcquire: %v", err)
			} else {
				p.Unlock(tctx(t, 10*time.Second))
			}
			var kept []string
			if tc.beside {
				p, err := other.TryAcquire(tctx(t, 10*time.Second), k, 2)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Unlock(tctx(t, 10*time.Second))
				kept = []string{permitOwner(t, p)}
			}

			counter := func() string { return raw.Get(context.Background(), lk+counterSuffix).Val() }
			before := counter()
			err := duringStall(t, srv, tc.cancel, func(ctx context.Context) error {
				_, err := l.TryAcquire(ctx, k, 2)
				return err
			})
			if !errors.Is(err, lock.ErrNotAcquired) || (tc.cancel && !errors.Is(err, context.Canceled)) {
				t.Errorf("TryAcquire against a stalled server: err = %v, want ErrNotAcquired (and the context's error)", err)
			}
			if !eventually(5*time.Second, func() bool {
				_, owners := permitState(t, raw, lk)
				return fmt.Sprint(owners) == fmt.Sprint(kept)
			}) {
				_, owners := permitState(t, raw, lk)
				t.Fatalf("permits %v after the stalled grant; want %v", owners, kept)
			}
			voided, _ := raw.Keys(context.Background(), lk+redisx.VoidInfix+"*").Result()
			granted := counter() != before
			t.Logf("granted and removed: %v; tombstones: %d", granted, len(voided))
			if !granted && len(voided) == 0 {
				t.Errorf("neither the grant nor the clean-up reached the server")
			}
			v, _ := permitState(t, raw, lk)
			if want := map[bool]string{false: "", true: "S2"}[tc.beside]; v != want {
				t.Errorf("lock key %q after the clean-up; want %q", v, want)
			}
			if n := raw.Exists(context.Background(), lk+queueSuffix, lk+entriesSuffix).Val(); n != 0 {
				t.Errorf("%d queue keys left", n)
			}
			// The permit of the lost grant is free again.
			p, err := other.TryAcquire(tctx(t, 10*time.Second), k, 2)
			if err != nil {
				t.Fatalf("the lost grant's permit is not free: %v", err)
			}
			p.Unlock(tctx(t, 10*time.Second))
		})
	}
}

// A limit other than the key's is refused with ErrInvalid, saying both,
// and changes nothing: while permits are held, and while permit waiters
// with the key's limit are queued behind a writer (through TryAcquire,
// and a blocking Acquire, whose Join tries acquire.lua or wait.lua).
func TestSemaphoreLimitMismatch(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		ls := semLockers(t, c, 3)
		k := testKey(t)
		lk := lockKey(DefaultPrefix, k)
		ctx := tctx(t, 30*time.Second)
		refused := func(what string, err error, key, asked int) {
			t.Helper()
			want := fmt.Sprintf("the key is a semaphore of %d permits, not %d", key, asked)
			if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err = %v; want ErrInvalid saying %q", what, err, want)
			}
		}

		p, err := ls[0].TryAcquire(ctx, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ls[1].TryAcquire(ctx, k, 3)
		refused("TryAcquire of 3 beside a permit of 2", err, 2, 3)
		_, err = ls[1].Acquire(ctx, k, 1)
		refused("Acquire of 1 beside a permit of 2", err, 2, 1)
		if v, owners := permitState(t, c, lk); v != "S2" || len(owners) != 1 {
			t.Errorf("after the refusals: lock key %q, %d permits; want \"S2\", 1", v, len(owners))
		}
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}

		// A writer holds the key; a permit waiter of 2 is queued.
		x, err := ls[0].Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		grants := make(chan grant, 1)
		queueWaiter(t, c, lk, 1, grants, "permit of 2", func() (*lock.Lease, error) { return ls[1].Acquire(ctx, k, 2) })
		_, err = ls[2].TryAcquire(ctx, k, 5)
		refused("TryAcquire of 5 with a waiter of 2 queued", err, 2, 5)
		_, err = ls[2].Acquire(ctx, k, 5)
		refused("Acquire of 5 with a waiter of 2 queued (a new Locker)", err, 2, 5)
		_, err = ls[1].Acquire(ctx, k, 5) // its key's channel is subscribed: wait.lua first
		refused("Acquire of 5 with a waiter of 2 queued (the waiter's Locker)", err, 2, 5)
		// The driver's wait step alone.
		res, err := waitScript.Run(ctx, c, names(DefaultPrefix, k, ownerA)[:6], ownerA, 1000, "inbox", redisx.EntryLifeMS, "p5").Int64Slice()
		if err != nil || fmt.Sprint(res) != "[3 2]" {
			t.Errorf("wait.lua of a permit of 5: %v, %v; want [3 2]", res, err)
		}
		time.Sleep(100 * time.Millisecond) // the refused waiters' Leave, in the background
		if n := c.ZCard(ctx, lk+queueSuffix).Val(); n != 1 {
			t.Errorf("%d waiters queued after the refusals; want the permit waiter alone", n)
		}
		if err := x.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		g := nextGrant(t, grants, 5*time.Second)
		if v, _ := permitState(t, c, lk); v != "S2" {
			t.Errorf("lock key %q after the hand-over to the permit waiter, want \"S2\"", v)
		}
		if err := g.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Once the permits are gone, the key takes any limit.
		q, err := ls[2].TryAcquire(ctx, k, 5)
		if err != nil {
			t.Fatalf("TryAcquire of 5 once the permits of 2 are gone: %v", err)
		}
		q.Unlock(ctx)
		assertNoNames(t, c, lk)
	})
}

// Refresh extends the caller's permit alone, and the lock key to at least
// it; a permit expired, or whose lock key was deleted, is not held (and
// its member goes); Resume checks the limit and the token.
func TestSemaphoreRefreshAndResume(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		d := testDriver(c)
		defer d.Close()
		ctx := tctx(t, 10*time.Second)
		k := testKey(t)
		lk := lockKey(DefaultPrefix, k)
		permit := func(owner string, ttl time.Duration) *driver.Lease {
			l := newLease(k, owner, ttl)
			l.Mode, l.Limit = driver.Permit, 2
			if err := d.Acquire(ctx, l); err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			return l
		}
		a, b := permit(ownerA, 300*time.Millisecond), permit(ownerB, 2*time.Second)
		before := c.ZScore(ctx, lk+permitsSuffix, ownerB).Val()
		if _, err := d.Refresh(ctx, a, 5*time.Second); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if pttl := c.PTTL(ctx, lk).Val(); pttl < 4*time.Second {
			t.Errorf("lock key PTTL %v after a permit's Refresh to 5s", pttl)
		}
		if after := c.ZScore(ctx, lk+permitsSuffix, ownerB).Val(); after != before {
			t.Errorf("the other permit's expiry moved from %v to %v", before, after)
		}
		// a's Refresh to 200ms shortens nothing: not a's permit, nor the
		// lock key.
		if _, err := d.Refresh(ctx, a, 200*time.Millisecond); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if pttl := c.PTTL(ctx, lk).Val(); pttl < 4*time.Second {
			t.Errorf("lock key PTTL %v after a permit's Refresh to 200ms; want it kept", pttl)
		}
		now := c.Time(ctx).Val().UnixMilli()
		if left := int64(c.ZScore(ctx, lk+permitsSuffix, ownerA).Val()) - now; left < 4000 {
			t.Errorf("the permit expires in %d ms after its Refresh to 200ms, was 5s; want it kept", left)
		}
		// a's permit expires (its score passes).
		c.ZAddXX(ctx, lk+permitsSuffix, redis.Z{Score: float64(now - 1), Member: ownerA})
		if _, err := d.Refresh(ctx, a, time.Second); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh of an expired permit: %v, want ErrNotHeld", err)
		}
		if err := c.ZScore(ctx, lk+permitsSuffix, ownerA).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("the expired permit's member is still there (%v)", err)
		}

		for _, tc := range []struct {
			what  string
			limit int
			token uint64
		}{{"another limit", 3, b.Token}, {"a token not given yet", 2, b.Token + 1000000}} {
			r := newLease(k, ownerB, time.Second)
			r.Mode, r.Limit, r.Token = driver.Permit, tc.limit, tc.token
			if err := d.Resume(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("Resume with %s: %v, want ErrNotHeld", tc.what, err)
			}
		}
		r := newLease(k, ownerB, 3*time.Second)
		r.Mode, r.Limit, r.Token = driver.Permit, 2, b.Token
		if err := d.Resume(ctx, r); err != nil {
			t.Fatalf("Resume: %v", err)
		}

		c.Del(ctx, lk) // as the conformance harness's DeleteKey
		if _, err := d.Refresh(ctx, b, time.Second); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh of a permit whose lock key was deleted: %v, want ErrNotHeld", err)
		}
		if err := d.Release(ctx, b); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release of a permit whose lock key was deleted: %v, want ErrNotHeld", err)
		}
		assertNoNames(t, c, lk)
	})
}
