package redisnx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/ordertest"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// waitQueued waits until n waiters are queued for lock key lk.
func waitQueued(t *testing.T, c redis.UniversalClient, lk string, n int64) {
	t.Helper()
	if !eventually(5*time.Second, func() bool { return c.ZCard(tctx(t, time.Second), lk+queueSuffix).Val() == n }) {
		t.Fatalf("%d waiters not queued: %d entries", n, c.ZCard(tctx(t, time.Second), lk+queueSuffix).Val())
	}
}

// pollingDriver hides the driver's queue from lock: Lock then retries on
// release messages, as before the queue, and the releaser's wake-up is a
// race between all waiters.
type pollingDriver struct {
	driver.Driver
	driver.Notifier
}

// Blocking Lock calls are granted in arrival order, on a single server and
// on a Cluster. The check has teeth: the same scenario without the queue
// (waiters woken by the release race for the key) is caught out of order.
func TestQueueFIFO(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		k := testKey(t)
		q := lockKey(DefaultPrefix, k) + queueSuffix
		queued := func() int64 { return c.ZCard(tctx(t, time.Second), q).Val() }
		l := newTestLocker(t, c, nil)
		order := ordertest.GrantOrder(t, func() *lock.Locker { return l }, k, 8, queued)
		if !ordertest.IsFIFO(order) {
			t.Errorf("grant order %v; want arrival order", order)
		}
		if n := c.Exists(tctx(t, time.Second), q, lockKey(DefaultPrefix, k)+entriesSuffix, lockKey(DefaultPrefix, k)).Val(); n != 0 {
			t.Errorf("%d of the lock key and the queue's keys left after every waiter released", n)
		}
	})
	t.Run("control", func(t *testing.T) {
		c := sharedClient(t, nil)
		d := testDriver(c)
		l := lock.New(pollingDriver{d, d}, nil)
		defer l.Close()
		for try := range 3 {
			order := ordertest.GrantOrder(t, func() *lock.Locker { return l }, testKey(t)+strconv.Itoa(try), 8, nil)
			if !ordertest.IsFIFO(order) {
				t.Logf("without the queue: grant order %v", order)
				return
			}
		}
		t.Errorf("without the queue, three runs of eight waiters were granted in arrival order: the FIFO check cannot tell")
	})
}

// A waiter whose Lock is cancelled leaves no queue entry behind, and the
// key is free once the holder releases it.
func TestQueueCancelLeavesNothing(t *testing.T) {
	c := sharedClient(t, nil)
	l := newTestLocker(t, c, nil)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	held, err := l.TryLock(tctx(t, 5*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, k)
		done <- err
	}()
	waitQueued(t, c, lk, 1)
	cancel()
	if err := <-done; !isNotAcquired(err) {
		t.Fatalf("cancelled Lock: err = %v, want ErrNotAcquired", err)
	}
	// Lock returns at once; its leave of the queue follows in the
	// background.
	if !eventually(time.Second, func() bool { return c.Exists(tctx(t, time.Second), lk+queueSuffix, lk+entriesSuffix).Val() == 0 }) {
		t.Errorf("queue keys left a second after the only waiter was cancelled")
	}
	if err := held.Unlock(tctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(tctx(t, time.Second), lk).Val(); n != 0 {
		t.Errorf("lock key held after the release: the cancelled waiter was handed the key")
	}
}

// A release that publishes nothing (a foreign SET NX lock deleted by its
// owner) is found by the waiter's heartbeat, long before the foreign
// lock's PTTL.
func TestQueueHeartbeatFindsSilentRelease(t *testing.T) {
	c := sharedClient(t, nil)
	l := newTestLocker(t, c, nil)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	if err := c.Set(tctx(t, time.Second), lk, "foreign", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		lease, err := l.Lock(tctx(t, 20*time.Second), k)
		got <- time.Now()
		if err != nil {
			t.Errorf("Lock: %v", err)
			return
		}
		_ = lease.Unlock(tctx(t, 5*time.Second))
	}()
	waitQueued(t, c, lk, 1)
	if err := c.Del(tctx(t, time.Second), lk).Err(); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case at := <-got:
		if d := at.Sub(deleted); d > driver.Heartbeat+time.Second {
			t.Errorf("granted %v after the silent release; want within a heartbeat (%v) and a second", d, driver.Heartbeat)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("waiter not granted 15s after the silent release")
	}
}

// queueEntry writes a waiter's queue entry by hand: owner, queued now,
// dead after life, asking for ttl.
func queueEntry(t *testing.T, c redis.UniversalClient, k, owner string, life, ttl time.Duration) {
	t.Helper()
	lk := lockKey(DefaultPrefix, k)
	now, err := c.Time(tctx(t, time.Second)).Result()
	if err != nil {
		t.Fatal(err)
	}
	ctx := tctx(t, time.Second)
	if err := c.ZAdd(ctx, lk+queueSuffix, redis.Z{Score: float64(now.UnixMicro()), Member: owner}).Err(); err != nil {
		t.Fatal(err)
	}
	entry := fmt.Sprintf("%d %d %sinbox:%s", now.Add(life).UnixMilli(), ttl.Milliseconds(), DefaultPrefix, owner)
	if err := c.HSet(ctx, lk+entriesSuffix, owner, entry).Err(); err != nil {
		t.Fatal(err)
	}
	c.PExpire(ctx, lk+queueSuffix, time.Minute)
	c.PExpire(ctx, lk+entriesSuffix, time.Minute)
}

// A queue entry whose waiter stopped renewing it (crashed, cut off) is
// skipped: the release hands the key to the live waiter behind it. The
// check has teeth: a dead entry still within its lifetime is served.
func TestQueueSkipsDeadWaiter(t *testing.T) {
	c := sharedClient(t, nil)
	l := newTestLocker(t, c, nil)
	for _, tc := range []struct {
		name     string
		life     time.Duration // of the hand-written entry
		wantLive bool
	}{
		{"dead", 100 * time.Millisecond, true},
		{"control/alive", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testKey(t)
			lk := lockKey(DefaultPrefix, k)
			held, err := l.TryLock(tctx(t, 5*time.Second), k)
			if err != nil {
				t.Fatal(err)
			}
			ghost := strings.Repeat("d", 32)
			queueEntry(t, c, k, ghost, tc.life, 30*time.Second)
			got := make(chan error, 1)
			go func() {
				lease, err := l.Lock(tctx(t, 3*time.Second), k)
				if err == nil {
					_ = lease.Unlock(tctx(t, 5*time.Second))
				}
				got <- err
			}()
			waitQueued(t, c, lk, 2)            // behind the hand-written entry
			time.Sleep(200 * time.Millisecond) // the short entry is dead
			if err := held.Unlock(tctx(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			err = <-got
			if tc.wantLive && err != nil {
				t.Errorf("live waiter behind a dead entry: %v; want the key", err)
			}
			if !tc.wantLive {
				if err == nil {
					t.Errorf("live waiter got the key ahead of a live entry queued before it")
				}
				if v := c.Get(tctx(t, time.Second), lk).Val(); v != ghost {
					t.Errorf("lock key holds %q; want the first entry's owner", v)
				}
			}
			c.Del(tctx(t, time.Second), lk, lk+queueSuffix, lk+entriesSuffix)
		})
	}
}

// TryLock is fair to the queue: a free key with a live waiter queued goes
// to that waiter, and TryLock is refused.
func TestTryLockYieldsToQueue(t *testing.T) {
	c := sharedClient(t, nil)
	l := newTestLocker(t, c, nil)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	waiter := strings.Repeat("e", 32)
	queueEntry(t, c, k, waiter, time.Minute, 30*time.Second)
	_, err := l.TryLock(tctx(t, 5*time.Second), k)
	if !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLock with a waiter queued: err = %v, want ErrHeld", err)
	}
	if v := c.Get(tctx(t, time.Second), lk).Val(); v != waiter {
		t.Errorf("lock key holds %q; want the queued waiter's owner", v)
	}
	e := c.HGet(tctx(t, time.Second), lk+entriesSuffix, waiter).Val()
	if tok, err := strconv.ParseUint(strings.TrimPrefix(e, "g"), 10, 64); !strings.HasPrefix(e, "g") || err != nil || tok == 0 {
		t.Errorf("waiter's entry %q; want g and its token", e)
	}
	c.Del(tctx(t, time.Second), lk, lk+queueSuffix, lk+entriesSuffix)
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}

// The hand-over's push is the grant: the waiter's Lock returns after no
// request of its own after the release (its follow-up's BLPOP was sent
// before it and returns the grant). A waiter woken by a message instead
// sends one, the wait.lua that finds the key its own. A lock check of the
// heartbeat may fall between release and grant; one hand-off in three
// with none is asked.
func TestHandOverTakesNoRequest(t *testing.T) {
	c := sharedClient(t, nil)
	holder := newTestLocker(t, c, nil)
	wc := cloneClient(t, c, "waiter")
	var count counter
	addHook(wc, &count)
	waiter := newTestLocker(t, wc, nil)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	var scripts []int64
	for range 3 {
		held, err := holder.TryLock(tctx(t, 5*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var lease *lock.Lease
		go func() {
			var err error
			lease, err = waiter.Lock(tctx(t, 10*time.Second), k)
			got <- err
		}()
		waitQueued(t, c, lk, 1)
		time.Sleep(20 * time.Millisecond) // the reply of the waiter's wait.lua is in
		before := count.cmds.Load()
		if err := held.Unlock(tctx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		scripts = append(scripts, count.cmds.Load()-before)
		if lease.Token() <= held.Token() {
			t.Errorf("hand-over token %d, not above the holder's %d", lease.Token(), held.Token())
		}
		if err := lease.Unlock(tctx(t, 5*time.Second)); err != nil {
			t.Fatalf("the handed-over lease's Unlock: %v", err)
		}
		if slices.Contains(scripts, 0) {
			return
		}
	}
	t.Errorf("scripts the waiter ran between the release and its grant, per hand-off: %v; want none in one of them", scripts)
}

// The queue's keys live two entry lifetimes after the last waiter touched
// them (prelude.lua's keep_queue), so that a queue whose waiters all died
// is not left behind, and no shorter, so that a live waiter's entry is not.
func TestQueueKeysExpire(t *testing.T) {
	c := sharedClient(t, nil)
	holder, waiter := newTestLocker(t, c, nil), newTestLocker(t, c, nil)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	ctx := tctx(t, 10*time.Second)
	held, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		lease, err := waiter.Lock(ctx, k)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		done <- err
	}()
	waitQueued(t, c, lk, 1)
	life := 2 * redisx.EntryLife
	for _, name := range []string{lk + queueSuffix, lk + entriesSuffix} {
		if p := c.PTTL(ctx, name).Val(); p <= life-time.Second || p > life {
			t.Errorf("%s: PTTL %v; want about %v", name, p, life)
		}
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
