package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/settest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// setKeys returns n keys whose lock keys (default prefix) share a Cluster
// slot, in sorted order.
func setKeys(t *testing.T, n int) []string {
	base := testKey(t)
	slot := redisx.Slot(redisx.LockKey(DefaultPrefix, base+"/0"))
	ks := []string{base + "/0"}
	for i := 1; len(ks) < n; i++ {
		if k := fmt.Sprintf("%s/%d", base, i); redisx.Slot(redisx.LockKey(DefaultPrefix, k)) == slot {
			ks = append(ks, k)
		}
	}
	return ks
}

// setLeases returns a set's driver leases of keys.
func setLeases(keys []string) []*driver.Lease {
	ls := make([]*driver.Lease, len(keys))
	for i, k := range keys {
		ls[i] = &driver.Lease{Key: k, Owner: owner(), Mode: driver.Exclusive, TTL: 10 * time.Second}
	}
	return ls
}

// assertSetAbsent fails if any lock key of keys exists.
func assertSetAbsent(t *testing.T, rdb redis.UniversalClient, d *watchDriver, keys []string, why string) {
	t.Helper()
	for _, k := range keys {
		if v, err := rdb.Get(context.Background(), d.LockKey(k)).Result(); err != redis.Nil {
			t.Errorf("%s: %q holds %q (%v), want nothing", why, k, v, err)
		}
	}
}

// A set whose lock keys share a slot is taken in one step, standalone and
// on a Cluster; its tokens follow and precede single-key grants of the
// same keys, and each member is held against single-key lockers.
func TestSetAtomic(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l, _ := newTestLocker(t, rdb, nil)
		other, _ := newTestLocker(t, rdb, nil)
		ks := setKeys(t, 3)
		before, err := l.Lock(ctx, ks[0])
		if err != nil {
			t.Fatal(err)
		}
		before.Unlock(ctx)
		m, err := l.TryLockMany(ctx, ks)
		if err != nil || !m.Atomic() {
			t.Fatalf("TryLockMany of a free set: %v (atomic %v), want it taken in one step", err, m.Atomic())
		}
		if tok, _ := m.Token(ks[0]); tok <= before.Token() {
			t.Errorf("set's token %d after a single grant's %d", tok, before.Token())
		}
		for _, k := range ks {
			if _, err := other.TryLock(ctx, k); !errors.Is(err, lock.ErrHeld) {
				t.Errorf("TryLock of a member %q: %v, want ErrHeld", k, err)
			}
		}
		setTok, _ := m.Token(ks[2])
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := other.TryLock(ctx, ks[2])
		if err != nil {
			t.Fatal(err)
		}
		if after.Token() <= setTok {
			t.Errorf("single grant's token %d after the set's %d", after.Token(), setTok)
		}
		after.Unlock(ctx)
	})
}

// A set with a held member is refused with the holder's PTTL as its hint,
// and writes nothing: no other member is taken, no counter moves.
func TestSetHeld(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		ks := setKeys(t, 3)
		held := &driver.Lease{Key: ks[2], Owner: owner(), Mode: driver.Exclusive, TTL: 5 * time.Second}
		if err := d.Acquire(ctx, held); err != nil {
			t.Fatal(err)
		}
		err := d.AcquireSet(ctx, setLeases(ks))
		var he *driver.HeldError
		if !errors.As(err, &he) || he.RetryAfter <= 0 || he.RetryAfter > 5*time.Second+time.Millisecond {
			t.Fatalf("AcquireSet over a held key: %v, want a HeldError with the holder's PTTL", err)
		}
		assertSetAbsent(t, rdb, d, ks[:2], "a set refused for a held key")
		for _, k := range ks[:2] {
			if rdb.Exists(ctx, counterKey(d.LockKey(k))).Val() != 0 {
				t.Errorf("a refused set moved %q's counter", k)
			}
		}
		if v := rdb.Get(ctx, d.LockKey(ks[2])).Val(); v != held.Owner {
			t.Errorf("the held key's holder is %q after a refused set, want %q", v, held.Owner)
		}
	})
}

// Where the keys may be on different servers, AcquireSet refuses with
// ErrNotAtomic before any I/O; bad input is ErrInvalid.
func TestSetNotAtomic(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	defer ring.Close()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cl.Close()
	k := testKey(t)
	for name, c := range map[string]redis.UniversalClient{"ring": ring, "cluster": cl} {
		d := testDriver(c, DefaultPrefix)
		ls := setLeases([]string{k + "/a", k + "/b"})
		if redisx.Slot(d.LockKey(ls[0].Key)) == redisx.Slot(d.LockKey(ls[1].Key)) {
			t.Fatalf("the test's keys share a slot: pick others")
		}
		start := time.Now()
		if err := d.AcquireSet(testCtx(t), ls); !errors.Is(err, driver.ErrNotAtomic) || time.Since(start) > time.Second {
			t.Errorf("%s: AcquireSet of keys in two slots: %v after %v, want ErrNotAtomic at once", name, err, time.Since(start))
		}
		for _, bad := range [][]*driver.Lease{nil, {ls[0], nil}} {
			if err := d.AcquireSet(testCtx(t), bad); !errors.Is(err, driver.ErrInvalid) {
				t.Errorf("%s: AcquireSet(%v): %v, want ErrInvalid", name, bad, err)
			}
		}
		d.Close()
	}
}

// A set with a key whose first waiter is alive is refused, and writes
// nothing; once that waiter is dead, the set takes its place, as Acquire
// does, and its element leaves the queue.
func TestSetWaiterFirst(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		ks := setKeys(t, 3)
		lk := d.LockKey(ks[1])
		waiter := owner()
		rdb.RPush(ctx, waitQueue(lk), waiter)
		rdb.Set(ctx, waitEntry(lk, waiter), "10000 0", 3*time.Second)
		if err := d.AcquireSet(ctx, setLeases(ks)); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("AcquireSet over a live waiter: %v, want ErrHeld", err)
		}
		assertSetAbsent(t, rdb, d, ks, "a set refused for a waiter")
		for _, k := range ks {
			if n := rdb.Exists(ctx, counterKey(d.LockKey(k))).Val(); n != 0 {
				t.Errorf("a refused set moved %q's counter", k)
			}
		}

		rdb.Del(ctx, waitEntry(lk, waiter)) // the waiter dies
		ls := setLeases(ks)
		if err := d.AcquireSet(ctx, ls); err != nil {
			t.Fatalf("AcquireSet over a dead waiter: %v", err)
		}
		for _, l := range ls {
			if v := rdb.Get(ctx, d.LockKey(l.Key)).Val(); v != l.Owner || l.Token == 0 {
				t.Errorf("%q: holder %q token %d, want %q and a token", l.Key, v, l.Token, l.Owner)
			}
		}
		if n := rdb.LLen(ctx, waitQueue(lk)).Val(); n != 0 {
			t.Errorf("the dead waiter's element is still queued (%d)", n)
		}
	})
}

// A plain SET NX lock taken on any one member between the set's reads and
// its EXEC aborts the transaction (every lock key is watched): the set is
// refused, the other lock stays, and nothing else is written.
func TestSetWatchesEveryKey(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		for i := range 3 {
			ks := setKeys(t, 3)
			var once sync.Once
			race := func(op, lk string) {
				once.Do(func() { rdb.SetNX(ctx, d.LockKey(ks[i]), "foreign", 10*time.Second) })
			}
			d.beforeExec.Store(&race)
			aborts := d.stats.grantAborts.Load()
			err := d.AcquireSet(ctx, setLeases(ks))
			d.beforeExec.Store(nil)
			if !errors.Is(err, driver.ErrHeld) {
				t.Errorf("key %d taken before the EXEC: AcquireSet: %v, want ErrHeld", i, err)
			}
			if v := rdb.Get(ctx, d.LockKey(ks[i])).Val(); v != "foreign" {
				t.Errorf("key %d: the other lock was overwritten by %q", i, v)
			}
			if d.stats.grantAborts.Load() == aborts {
				t.Errorf("key %d: no aborted transaction counted", i)
			}
			assertSetAbsent(t, rdb, d, append(ks[:i:i], ks[i+1:]...), fmt.Sprintf("key %d taken by another", i))
		}
	})
}

// After a set with an unknown outcome, the clean-up Release of each lease
// (as lock sends it: Token unset) removes a grant that was applied, and a
// grant whose EXEC arrives after the clean-up is aborted (the tombstones
// are watched) and not tried again (they are read).
func TestSetCleanup(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		cleanup := func(ls []*driver.Lease, want error) {
			t.Helper()
			for _, l := range ls {
				c := *l
				c.Token = 0
				if err := d.Release(ctx, &c); !errors.Is(err, want) {
					t.Errorf("clean-up of %q: %v, want %v", l.Key, err, want)
				}
			}
		}

		// Applied, reply lost: the clean-up deletes every member.
		ks := setKeys(t, 3)
		ls := setLeases(ks)
		if err := d.AcquireSet(ctx, ls); err != nil {
			t.Fatal(err)
		}
		cleanup(ls, nil)
		assertSetAbsent(t, rdb, d, ks, "after the clean-up of an applied set")

		// The EXEC comes after the clean-up: with one attempt allowed, the
		// tombstones' watch alone refuses it; with retries, their read
		// refuses the next attempt.
		for _, attempts := range []int{1, MaxAttempts} {
			d.maxAttempts = attempts
			ks := setKeys(t, 3)
			ls := setLeases(ks)
			var once sync.Once
			late := func(op, lk string) { once.Do(func() { cleanup(ls, driver.ErrNotHeld) }) }
			d.beforeExec.Store(&late)
			err := d.AcquireSet(ctx, ls)
			d.beforeExec.Store(nil)
			if !errors.Is(err, driver.ErrHeld) {
				t.Errorf("%d attempts: AcquireSet whose EXEC came after its clean-up: %v, want ErrHeld", attempts, err)
			}
			assertSetAbsent(t, rdb, d, ks, fmt.Sprintf("%d attempts: an EXEC after the clean-up", attempts))
		}
	})
}

// Overlapping sets with single-key lockers mixed in (settest.Stress),
// some of the sets taken in one step (AcquireSet's transaction).
func TestAudit42SetStress(t *testing.T) {
	url := Scheme + "://" + testserver.StartRedis(t, nil).Addr()
	n := settest.Stress(t, func() *lock.Locker {
		l, err := lock.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
	t.Logf("sets taken in one step: %d", n)
	if n == 0 {
		t.Error("no set was taken in one step: the stress did not reach AcquireSet's grants")
	}
}

// A TryLockMany whose one-step EXEC loses its reply (the call is cancelled
// while the proxy holds it) leaves none of the set held once lock's
// clean-up ran: when the EXEC was applied (its reply held), the clean-up
// deletes every member; when it reaches the server only after the
// clean-up (the request held), it is aborted.
func TestSetLostExecReply(t *testing.T) {
	admin := standalone(t)
	proxy := startAuditProxy(t, admin.Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	l, d := newTestLocker(t, rdb, &Options{Options: lock.Options{TTL: time.Minute}})
	ctx := testCtx(t)
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "applied", true: "late"}[late], func(t *testing.T) {
			ks := setKeys(t, 3)
			if late {
				exec := []byte("exec")
				proxy.Late.Store(true)
				proxy.Gate.Store(true)
				proxy.HoldMatch.Store(&exec)
				defer func() { proxy.HoldMatch.Store(nil); proxy.Gate.Store(false); proxy.Late.Store(false) }()
			} else {
				hold := func(op, lk string) { proxy.HoldReply.Store(true) }
				d.beforeExec.Store(&hold)
				defer d.beforeExec.Store(nil)
			}
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				m, err := l.TryLockMany(cctx, ks)
				if err == nil {
					m.Unlock(ctx)
				}
				done <- err
			}()
			time.Sleep(300 * time.Millisecond)
			cancel()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("granted with its EXEC or its reply held")
				}
			case <-time.After(2 * time.Second):
				t.Fatal("TryLockMany did not return after its context was cancelled")
			}
			d.beforeExec.Store(nil)
			proxy.HoldReply.Store(false)
			if !late && admin.Exists(ctx, counterKey(d.LockKey(ks[0]))).Val() == 0 {
				t.Fatal("the EXEC was not applied: the test proves nothing")
			}
			time.Sleep(time.Second) // the clean-up runs
			if late {
				before := execCalls(ctx, admin)
				proxy.Gate.Store(false)
				time.Sleep(500 * time.Millisecond)
				if execCalls(ctx, admin) == before {
					t.Fatal("the late EXEC did not reach Redis")
				}
			}
			assertSetAbsent(t, admin, d, ks, "after a set's lost EXEC and its clean-up")
		})
	}
}

// BenchmarkSetCycle: TryLockMany and Unlock of 3 free keys, in one step
// (AcquireSet's transaction) and key by key (a note makes lock take the
// keys one by one: a TryLock each).
func BenchmarkSetCycle(b *testing.B) {
	l := New(benchClient(b, "standalone"), &Options{Options: lock.Options{DisableAutoRenew: true}})
	b.Cleanup(func() { l.Close() })
	ctx := context.Background()
	base := fmt.Sprintf("rediswatch-bench/%d", time.Now().UnixNano())
	keys := []string{base + "/a", base + "/b", base + "/c"}
	for _, bc := range []struct {
		name   string
		opts   []lock.Option
		atomic bool
	}{{"one-step", nil, true}, {"key-by-key", []lock.Option{lock.WithNote("n")}, false}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m, err := l.TryLockMany(ctx, keys, bc.opts...)
				if err != nil || m.Atomic() != bc.atomic {
					b.Fatalf("TryLockMany: %v", err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
