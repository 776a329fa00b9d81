package rediswatch

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// semLocker returns a Locker with permits over rdb without auto-renewal, closed at
// cleanup.
func semLocker(t *testing.T, rdb redis.UniversalClient) *lock.Locker {
	t.Helper()
	l, _ := newTestLocker(t, rdb, nil)
	sl := l
	err := sl.Supports(lock.Permits)
	if err != nil {
		t.Fatalf("Supports(lock.Permits): %v", err)
	}
	return sl
}

type acquired struct {
	i     int
	lease *lock.Lease
	err   error
}

// acquireLater starts a blocking Acquire of a permit of limit, the i-th
// waiter, and returns once it is queued: lk's queue has n elements.
func acquireLater(t *testing.T, rdb redis.UniversalClient, l *lock.Locker, k string, limit, i int, n int64, got chan<- acquired) {
	t.Helper()
	go func() {
		p, err := l.Acquire(testCtx(t), k, limit)
		got <- acquired{i, p, err}
	}()
	if !eventually(5*time.Second, func() bool { return queueLen(t, rdb, redisx.LockKey(DefaultPrefix, k)) == n }) {
		t.Fatalf("waiter %d not queued (%d in the queue, want %d)", i, queueLen(t, rdb, redisx.LockKey(DefaultPrefix, k)), n)
	}
}

// nothingWithin fails if got delivers within d.
func nothingWithin(t *testing.T, got <-chan acquired, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("%s: waiter %d returned (err %v)", what, r.i, r.err)
	case <-time.After(d):
	}
}

func next(t *testing.T, got <-chan acquired, what string) acquired {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: waiter %d: %v", what, r.i, r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no waiter granted within 10s", what)
	}
	panic("unreachable")
}

// assertGone fails unless none of names exists on rdb within a second.
func assertGone(t *testing.T, rdb redis.UniversalClient, what string, names ...string) {
	t.Helper()
	var n int64
	if !eventually(time.Second, func() bool { n = rdb.Exists(testCtx(t), names...).Val(); return n == 0 }) {
		t.Errorf("%s: %d of %q left", what, n, names)
	}
}

// Permit waiters queued behind a lock are served in arrival order, as many
// as the limit at once: the lock's release names the first, and each
// permit's grant wakes the waiter behind it, until the permits are all
// taken; the next waiter gets the first permit returned.
func TestPermitWaitersServedInOrder(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		k := testKey(t)
		lk := redisx.LockKey(DefaultPrefix, k)
		const limit, waiters = 3, 5
		x, err := semLocker(t, rdb).TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan acquired, waiters)
		for i := range waiters {
			acquireLater(t, rdb, semLocker(t, rdb), k, limit, i, int64(i+1), got)
		}
		if err := x.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		var in []acquired
		for range limit {
			in = append(in, next(t, got, "after the lock's release"))
		}
		nothingWithin(t, got, 500*time.Millisecond, "with the permits all taken")
		// Grant order is token order.
		slices.SortFunc(in, func(a, b acquired) int { return int(a.lease.Token() - b.lease.Token()) })
		for j, r := range in {
			if r.i != j {
				t.Errorf("grants in order of waiters %v; want 0 1 2", func() (o []int) {
					for _, r := range in {
						o = append(o, r.i)
					}
					return o
				}())
				break
			}
			if r.lease.Limit() != limit {
				t.Errorf("waiter %d: Limit() = %d, want %d", r.i, r.lease.Limit(), limit)
			}
		}
		if v := rdb.Get(ctx, lk).Val(); v != "S3" {
			t.Errorf("lock key holds %q, want S3", v)
		}
		if n := rdb.ZCard(ctx, permitsKey(lk)).Val(); n != limit {
			t.Errorf("%d permits in the set, want %d", n, limit)
		}
		// Each permit returned lets the next waiter in, in order.
		for want := limit; want < waiters; want++ {
			if err := in[0].lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			r := next(t, got, "after a permit was returned")
			if r.i != want {
				t.Errorf("waiter %d got the returned permit; want waiter %d", r.i, want)
			}
			nothingWithin(t, got, 200*time.Millisecond, "after one permit was returned")
			in = append(in[1:], r)
		}
		for _, r := range in {
			if err := r.lease.Unlock(ctx); err != nil {
				t.Errorf("Unlock: %v", err)
			}
		}
		assertGone(t, rdb, "after every permit was returned", lk, permitsKey(lk), waitQueue(lk))
	})
}

// A writer queued behind permits waits for all of them to go, and is not
// passed by permits asked for after it, though the semaphore has room:
// TryAcquire is refused, and Acquire queues behind the writer.
func TestQueuedWriterNotPassedByPermits(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		k := testKey(t)
		lk := redisx.LockKey(DefaultPrefix, k)
		const limit = 3
		a, err := semLocker(t, rdb).TryAcquire(ctx, k, limit)
		if err != nil {
			t.Fatal(err)
		}
		b, err := semLocker(t, rdb).TryAcquire(ctx, k, limit)
		if err != nil {
			t.Fatal(err)
		}
		wl := semLocker(t, rdb)
		writer := make(chan acquired, 1)
		go func() {
			w, err := wl.Lock(ctx, k)
			writer <- acquired{-1, w, err}
		}()
		if !eventually(5*time.Second, func() bool { return queueLen(t, rdb, lk) == 1 }) {
			t.Fatalf("writer not queued behind the permits")
		}
		if _, err := semLocker(t, rdb).TryAcquire(ctx, k, limit); !errors.Is(err, lock.ErrHeld) {
			t.Errorf("TryAcquire with room but a writer queued: err = %v, want ErrHeld", err)
		}
		got := make(chan acquired, 1)
		acquireLater(t, rdb, semLocker(t, rdb), k, limit, 0, 2, got)
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		nothingWithin(t, writer, 300*time.Millisecond, "the writer with a permit still held")
		nothingWithin(t, got, 10*time.Millisecond, "the permit waiter behind the writer")
		if err := b.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		w := next(t, writer, "the writer after the last permit")
		nothingWithin(t, got, 300*time.Millisecond, "the permit waiter while the writer holds")
		if err := w.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		p := next(t, got, "the permit waiter after the writer")
		if !(a.Token() < b.Token() && b.Token() < w.lease.Token() && w.lease.Token() < p.lease.Token()) {
			t.Errorf("tokens %d %d (permits), %d (writer), %d (permit after it): want increasing", a.Token(), b.Token(), w.lease.Token(), p.lease.Token())
		}
		p.lease.Unlock(ctx)
		assertGone(t, rdb, "after the last release", lk, permitsKey(lk), waitQueue(lk))
	})
}

// The lock key of a semaphore holds "S<N>" with a PX at least the longest
// live permit's, so a plain SET NX lock (redsync, redislock) fails while
// permits are held; a permit returned leaves the PX as it was (it is not
// shortened to the longest permit left), and the last one deletes the key.
// A plain SET NX lock holding the key keeps permits out.
func TestPermitsExcludePlainSetNX(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l := semLocker(t, rdb)
		k := testKey(t)
		lk := redisx.LockKey(DefaultPrefix, k)
		short, err := l.TryAcquire(ctx, k, 2, lock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		long, err := l.TryAcquire(ctx, k, 2, lock.WithTTL(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if v := rdb.Get(ctx, lk).Val(); v != redisx.PermitsValue(2) {
			t.Errorf("lock key holds %q, want %q", v, redisx.PermitsValue(2))
		}
		if pttl := rdb.PTTL(ctx, lk).Val(); pttl <= 10*time.Second || pttl > 20*time.Second {
			t.Errorf("lock key PTTL %v with permits of 10s and 20s; want the longest's", pttl)
		}
		if ok, err := rdb.SetNX(ctx, lk, "raw-holder", time.Minute).Result(); err != nil || ok {
			t.Fatalf("plain SET NX PX on a key with permits held: ok %v, err %v; want refused", ok, err)
		}
		if err := long.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if pttl := rdb.PTTL(ctx, lk).Val(); pttl <= 10*time.Second || pttl > 20*time.Second {
			t.Errorf("lock key PTTL %v once the 20s permit was returned; want the 20s one's kept", pttl)
		}
		if ok, _ := rdb.SetNX(ctx, lk, "raw-holder", time.Minute).Result(); ok {
			t.Fatalf("plain SET NX PX took a key with a permit held")
		}
		if err := short.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := rdb.SetNX(ctx, lk, "raw-holder", time.Minute).Result(); err != nil || !ok {
			t.Fatalf("plain SET NX PX after the permits were returned: ok %v, err %v", ok, err)
		}
		if _, err := l.TryAcquire(ctx, k, 2); !errors.Is(err, lock.ErrHeld) {
			t.Errorf("TryAcquire of a key held by a plain SET NX lock: err = %v, want ErrHeld", err)
		}
		if n := rdb.Exists(ctx, permitsKey(lk)).Val(); n != 0 {
			t.Errorf("a refused TryAcquire left a permit")
		}
		rdb.Del(ctx, lk)
		p, err := l.TryAcquire(ctx, k, 2)
		if err != nil {
			t.Fatalf("TryAcquire after the plain lock's release: %v", err)
		}
		p.Unlock(ctx)
		assertGone(t, rdb, "after the last release", lk, permitsKey(lk))
	})
}

// A crashed holder's permit expires on its own, within its TTL, while the
// others stay: a new permit is granted in its place, and the limit still
// holds.
func TestPermitOfCrashedHolderExpires(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		k := testKey(t)
		lk := redisx.LockKey(DefaultPrefix, k)
		crashed, other, late := semLocker(t, rdb), semLocker(t, rdb), semLocker(t, rdb)
		const ttl = 400 * time.Millisecond
		start := time.Now()
		if _, err := crashed.TryAcquire(ctx, k, 2, lock.WithTTL(ttl)); err != nil {
			t.Fatal(err) // never renewed (no auto-renewal) nor released
		}
		stays, err := other.TryAcquire(ctx, k, 2, lock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := late.TryAcquire(ctx, k, 2); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("a third permit of two: err = %v, want ErrHeld", err)
		}
		p, err := late.Acquire(ctx, k, 2)
		if err != nil {
			t.Fatalf("Acquire once the crashed holder's permit expired: %v", err)
		}
		if d := time.Since(start); d < ttl-10*time.Millisecond || d > ttl+time.Second {
			t.Errorf("permit granted %v after the crashed holder's of %v", d, ttl)
		}
		if n := rdb.ZCard(ctx, permitsKey(lk)).Val(); n != 2 {
			t.Errorf("%d members in the set, want 2 (the expired one dropped)", n)
		}
		if _, err := crashed.TryAcquire(ctx, k, 2); !errors.Is(err, lock.ErrHeld) {
			t.Errorf("a third permit of two after the expiry: err = %v, want ErrHeld", err)
		}
		if err := stays.Refresh(ctx, 10*time.Second); err != nil {
			t.Errorf("the other holder's permit: Refresh: %v", err)
		}
		p.Unlock(ctx)
		stays.Unlock(ctx)
		assertGone(t, rdb, "after the last release", lk, permitsKey(lk))
	})
}

// A permit waiter queued behind full permits finds a permit returned
// silently (the member removed, no message) at its next heartbeat, long
// before the other permits expire. The check has teeth: while the permits
// are full, it stays queued.
func TestPermitWaiterHeartbeatFindsRoom(t *testing.T) {
	rdb := standalone(t)
	ctx := testCtx(t)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	d := testDriver(rdb, DefaultPrefix)
	defer d.Close()
	a := &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 1, TTL: time.Minute}
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	got := make(chan acquired, 1)
	acquireLater(t, rdb, semLocker(t, rdb), k, 1, 0, 1, got)
	nothingWithin(t, got, 2500*time.Millisecond, "the waiter with the permit held")
	rdb.ZRem(ctx, permitsKey(lk), a.Owner)
	start := time.Now()
	r := next(t, got, "after a silent return")
	if d := time.Since(start); d > 2*driver.Heartbeat+time.Second {
		t.Errorf("waiter granted %v after the silent return; want within two heartbeats", d)
	}
	r.lease.Unlock(ctx)
	assertGone(t, rdb, "after the last release", lk, permitsKey(lk), waitQueue(lk))
}

// A permit whose lock key alone is deleted (an eviction, an admin) is gone:
// its refresh and resume return ErrNotHeld, its stale member does not count
// against the next semaphore of the key, which may have another limit, and
// its release returns ErrNotHeld and leaves the new permits alone.
func TestPermitLockKeyDeleted(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		k := testKey(t)
		lk := d.LockKey(k)
		a := &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 2, TTL: 10 * time.Second}
		b := &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 2, TTL: 10 * time.Second}
		for _, l := range []*driver.Lease{a, b} {
			if err := d.Acquire(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		rdb.Del(ctx, lk)
		if _, err := d.Refresh(ctx, a, 10*time.Second); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh of a permit whose lock key was deleted: err = %v, want ErrNotHeld", err)
		}
		resume := *b
		if err := d.Resume(ctx, &resume); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Resume of a permit whose lock key was deleted: err = %v, want ErrNotHeld", err)
		}
		c := &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 1, TTL: 10 * time.Second}
		if err := d.Acquire(ctx, c); err != nil {
			t.Fatalf("a permit of one after the key was deleted under permits of two: %v", err)
		}
		if m := rdb.ZRange(ctx, permitsKey(lk), 0, -1).Val(); !slices.Equal(m, []string{c.Owner}) {
			t.Errorf("permits %q, want only the new one", m)
		}
		if err := d.Release(ctx, a); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release of the deleted permit: err = %v, want ErrNotHeld", err)
		}
		if _, err := d.Refresh(ctx, c, 10*time.Second); err != nil {
			t.Errorf("Refresh of the new permit: %v", err)
		}
		if err := d.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
		assertGone(t, rdb, "after the last release", lk, permitsKey(lk))
	})
}

// A limit other than the key's is refused with ErrInvalid saying both, and
// changes nothing: against permits held, for TryAcquire and for a blocking
// Acquire, and against a live permit waiter of another limit queued first.
func TestPermitLimitMismatch(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l := semLocker(t, rdb)
		k := testKey(t)
		lk := redisx.LockKey(DefaultPrefix, k)
		p, err := l.TryAcquire(ctx, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		counter := rdb.Get(ctx, counterKey(lk)).Val()
		for _, try := range []func() error{
			func() error { _, err := l.TryAcquire(ctx, k, 3); return err },
			func() error { _, err := l.Acquire(ctx, k, 3); return err },
		} {
			err := try()
			if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "the key is a semaphore of 2 permits, not 3") {
				t.Errorf("a limit of 3 on permits of 2: err = %v, want ErrInvalid saying both", err)
			}
		}
		if v := rdb.Get(ctx, lk).Val(); v != "S2" {
			t.Errorf("lock key holds %q after the refusals, want S2", v)
		}
		if n := rdb.ZCard(ctx, permitsKey(lk)).Val(); n != 1 {
			t.Errorf("%d permits after the refusals, want 1", n)
		}
		if c := rdb.Get(ctx, counterKey(lk)).Val(); c != counter {
			t.Errorf("the refusals moved the counter from %s to %s", counter, c)
		}
		var left []string
		if !eventually(time.Second, func() bool { left = rdb.Keys(ctx, redistest.GlobEscape(lk)+":w*").Val(); return len(left) == 0 }) {
			t.Errorf("the refused Acquire left queue state: %q", left)
		}
		p.Unlock(ctx)

		// A live permit waiter of limit 2 first in line, on a free key.
		ghost := strings.Repeat("f", 32)
		queueGhost(t, rdb, lk, ghost, time.Minute)
		rdb.Set(ctx, waitEntry(lk, ghost), entryPermitMode(2)+"30000 1", time.Minute)
		if _, err := l.TryAcquire(ctx, k, 3); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "semaphore of 2 permits, not 3") {
			t.Errorf("a limit of 3 behind a waiter for permits of 2: err = %v, want ErrInvalid", err)
		}
		if _, err := l.TryAcquire(ctx, k, 2); !errors.Is(err, lock.ErrHeld) {
			t.Errorf("a permit of 2 behind a live waiter: err = %v, want ErrHeld", err)
		}
		if n := rdb.Exists(ctx, lk, permitsKey(lk)).Val(); n != 0 {
			t.Errorf("the refused attempts granted something")
		}
		rdb.Del(ctx, waitQueue(lk), waitEntry(lk, ghost))
	})
}

// A permit's grant whose reply was lost is removed by its clean-up, and
// only it: another holder's permit keeps the key; a grant whose EXEC comes
// after the clean-up is aborted. (TestCleanupAfterLostGrantReply covers a
// lone permit.)
func TestCleanupAfterLostPermitReply(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		k := testKey(t)
		lk := d.LockKey(k)
		newPermit := func() *driver.Lease {
			return &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 3, TTL: 10 * time.Second}
		}
		other := newPermit()
		if err := d.Acquire(ctx, other); err != nil {
			t.Fatal(err)
		}
		check := func(what string) {
			t.Helper()
			if m := rdb.ZRange(ctx, permitsKey(lk), 0, -1).Val(); !slices.Equal(m, []string{other.Owner}) {
				t.Errorf("%s: permits %q, want only the other holder's", what, m)
			}
			if v := rdb.Get(ctx, lk).Val(); v != "S3" {
				t.Errorf("%s: lock key holds %q, want S3", what, v)
			}
		}

		cleanUpBeforeExec(t, ctx, d, newPermit())
		check("after a grant aborted by its clean-up")
		cleanUpAfterExec(t, ctx, d, newPermit())
		check("after the clean-up of an applied grant")
		if err := d.Release(ctx, other); err != nil {
			t.Fatal(err)
		}
		assertGone(t, rdb, "after the last release", lk, permitsKey(lk))
	})
}

// Permits work as a user allowed only what the package doc's Permissions
// section lists (denied @scripting with everything else), on one server and
// on a Cluster: see redisacl.ExercisePermits for what is done; and no
// refusal in any node's ACL LOG, and no script run.
func TestMinimalPermissionsPermits(t *testing.T) {
	rules := redisacl.DocRules(t, "doc.go")
	if slices.Contains(rules, "+@scripting") {
		t.Fatalf("doc.go's rules %q are not minimal", rules)
	}
	t.Run("standalone", func(t *testing.T) {
		srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-min", ACLRules: rules})
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer admin.Close()
		exercisePermits(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: srv.Username, Password: srv.Password}), admin)
		assertNoScripts(t, admin, srv.Username, srv.Password)
	})
	t.Run("cluster", func(t *testing.T) {
		admin := cluster(t)
		user, pass := redisacl.ClusterUser(t, admin, "dlock-min", append(append([]string{}, rules...), "+cluster|slots")...)
		exercisePermits(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: admin.Options().Addrs, Username: user, Password: pass}), admin)
		assertNoScripts(t, admin, user, pass)
	})
}

// exercisePermits runs redisacl.ExercisePermits through Lockers over rdb;
// admin, a client of the default user, watches the queue.
func exercisePermits(t *testing.T, rdb, admin redis.UniversalClient) {
	t.Cleanup(func() { rdb.Close() })
	newLocker := func(ttl time.Duration) *lock.Locker {
		l := New(rdb, &Options{Options: lock.Options{TTL: ttl}})
		t.Cleanup(func() { l.Close() })
		return l
	}
	queued := func(k string) {
		if !eventually(5*time.Second, func() bool { return queueLen(t, admin, redisx.LockKey(DefaultPrefix, k)) == 1 }) {
			t.Fatalf("permit waiter not queued")
		}
	}
	redisacl.ExercisePermits(t, newLocker(300*time.Millisecond), newLocker(0), queued)
}

// Every operation on permits takes two round trips (a held key's refusal:
// the read and UNWATCH; a refresh reads without WATCH), made of the commands driver/rediswatch's doc and
// docs/wire/redis.md list, and no script command.
func TestPermitRoundTrips(t *testing.T) {
	d, _, rec := recordedDriver(t)
	ctx := testCtx(t)
	k := testKey(t)
	permit := func(ttl time.Duration) *driver.Lease {
		return &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 2, TTL: ttl}
	}
	check := func(what string, want ...string) { t.Helper(); rec.check(t, what, want...) }
	const read = "watch get pttl time zrange zrange get lrange exists"
	a, b, c := permit(20*time.Second), permit(10*time.Second), permit(10*time.Second)
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	check("grant on a free key", read, "multi del set zadd pexpire set exec")
	if err := d.Acquire(ctx, b); err != nil {
		t.Fatal(err)
	}
	check("grant beside a longer permit", read, "multi zremrangebyscore zadd pexpire set exec")
	if err := d.Acquire(ctx, c); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("a third permit of two: %v", err)
	}
	check("grant with the permits all taken", read, "unwatch")
	if _, err := d.Refresh(ctx, b, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	check("refresh", "get time zscore", "unwatch multi zscore time zadd pexpire pexpire get exec")
	if err := d.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	check("release of the longest permit", "watch get time zrange zscore lrange", "unwatch multi zremrangebyscore zrem zrange publish exec")
	if err := d.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	check("release of the last permit", "watch get time zrange zscore lrange", "multi zrem del publish exec")
}
