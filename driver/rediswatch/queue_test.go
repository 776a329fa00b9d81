package rediswatch

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/ordertest"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

func eventually(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// queueLen is the length of k's queue.
func queueLen(t *testing.T, rdb redis.UniversalClient, lk string) int64 {
	return rdb.LLen(testCtx(t), waitQueue(lk)).Val()
}

// notifyingDriver hides the driver's queue from lock: Lock then retries on
// release messages, as before the queue, and a release wakes a race
// between all waiters.
type notifyingDriver struct {
	driver.Driver
	driver.Notifier
}

// Blocking Lock calls are granted in arrival order, on a single server and
// on a Cluster, and leave no queue behind. The check has teeth: the same
// scenario without the queue (waiters woken by the release race for the
// key) is caught out of order.
func TestQueueFIFO(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := testKey(t)
		lk := redisx.LockKey(DefaultPrefix, k)
		newLocker := func() *lock.Locker { l, _ := newTestLocker(t, rdb, nil); return l }
		order := ordertest.GrantOrder(t, newLocker, k, 8, func() int64 { return queueLen(t, rdb, lk) })
		if !ordertest.IsFIFO(order) {
			t.Errorf("grant order %v; want arrival order", order)
		}
		if n := rdb.Exists(testCtx(t), lk, waitQueue(lk)).Val(); n != 0 {
			t.Errorf("%d of the lock key and the queue left after every waiter released", n)
		}
	})
	t.Run("control", func(t *testing.T) {
		rdb := standalone(t)
		newLocker := func() *lock.Locker {
			d := testDriver(rdb, DefaultPrefix)
			l := lock.New(notifyingDriver{d, d}, &lock.Options{DisableAutoRenew: true})
			t.Cleanup(func() { l.Close() })
			return l
		}
		for try := range 3 {
			order := ordertest.GrantOrder(t, newLocker, testKey(t)+strconv.Itoa(try), 8, nil)
			if !ordertest.IsFIFO(order) {
				t.Logf("without the queue: grant order %v", order)
				return
			}
		}
		t.Errorf("without the queue, three runs of eight waiters were granted in arrival order: the FIFO check cannot tell")
	})
}

// A waiter whose Lock is cancelled leaves no queue element or entry
// behind, and the key is free once the holder releases it.
func TestQueueCancelLeavesNothing(t *testing.T) {
	rdb := standalone(t)
	l, _ := newTestLocker(t, rdb, nil)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	held, err := l.TryLock(testCtx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, k)
		done <- err
	}()
	if !eventually(5*time.Second, func() bool { return queueLen(t, rdb, lk) == 1 }) {
		t.Fatalf("waiter not queued")
	}
	cancel()
	if err := <-done; !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: err = %v, want ErrNotAcquired and Canceled", err)
	}
	// Lock returns at once; its leave of the queue follows in the
	// background.
	var left []string
	if !eventually(time.Second, func() bool { left = rdb.Keys(testCtx(t), redistest.GlobEscape(lk)+":w*").Val(); return len(left) == 0 }) {
		t.Errorf("queue state left a second after the only waiter was cancelled: %q", left)
	}
	if err := held.Unlock(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(testCtx(t), lk).Val(); n != 0 {
		t.Errorf("lock key held after the release: the cancelled waiter took the key")
	}
}

// A release that names no one (a foreign SET NX lock deleted by its owner)
// is found by the waiter's driver.Heartbeat, long before the foreign lock's PTTL.
func TestQueueHeartbeatFindsSilentRelease(t *testing.T) {
	rdb := standalone(t)
	l, _ := newTestLocker(t, rdb, nil)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	if err := rdb.Set(testCtx(t), lk, "foreign", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		lease, err := l.Lock(testCtx(t), k)
		got <- time.Now()
		if err != nil {
			t.Errorf("Lock: %v", err)
			return
		}
		_ = lease.Unlock(testCtx(t))
	}()
	if !eventually(5*time.Second, func() bool { return queueLen(t, rdb, lk) == 1 }) {
		t.Fatalf("waiter not queued")
	}
	if err := rdb.Del(testCtx(t), lk).Err(); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case at := <-got:
		if d := at.Sub(deleted); d > driver.Heartbeat+time.Second {
			t.Errorf("granted %v after the silent release; want within a driver.Heartbeat (%v) and a second", d, driver.Heartbeat)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("waiter not granted 15s after the silent release")
	}
}

// queueGhost puts a hand-made waiter first in k's queue, its entry alive
// for life.
func queueGhost(t *testing.T, rdb redis.UniversalClient, lk, owner string, life time.Duration) {
	t.Helper()
	ctx := testCtx(t)
	if err := rdb.RPush(ctx, waitQueue(lk), queueElem(owner, DefaultPrefix+redisx.InboxInfix+owner)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, waitEntry(lk, owner), "", life).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, waitQueue(lk), time.Minute)
}

// A queued waiter whose entry died (crashed, cut off) loses its place: the
// live waiter behind it is granted the key after a release. The check has
// teeth: a waiter whose entry lives is waited for.
func TestQueueSkipsDeadWaiter(t *testing.T) {
	rdb := standalone(t)
	l, _ := newTestLocker(t, rdb, nil)
	for _, tc := range []struct {
		name     string
		life     time.Duration // of the ghost's entry
		wantLive bool
	}{
		{"dead", 100 * time.Millisecond, true},
		{"control/alive", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testKey(t)
			lk := redisx.LockKey(DefaultPrefix, k)
			held, err := l.TryLock(testCtx(t), k)
			if err != nil {
				t.Fatal(err)
			}
			queueGhost(t, rdb, lk, strings.Repeat("d", 32), tc.life)
			got := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				lease, err := l.Lock(ctx, k)
				if err == nil {
					_ = lease.Unlock(testCtx(t))
				}
				got <- err
			}()
			if !eventually(5*time.Second, func() bool { return queueLen(t, rdb, lk) == 2 }) {
				t.Fatalf("waiter not queued behind the ghost")
			}
			time.Sleep(200 * time.Millisecond) // the short entry is dead
			if err := held.Unlock(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			err = <-got
			if tc.wantLive && err != nil {
				t.Errorf("live waiter behind a dead one: %v; want the key", err)
			}
			if !tc.wantLive && err == nil {
				t.Errorf("live waiter got the key ahead of a live waiter queued before it")
			}
			rdb.Del(testCtx(t), lk, waitQueue(lk))
		})
	}
}

// TryLock is fair to the queue: a free key with a live waiter first in
// line is refused to it; with a dead one first, TryLock takes the key and
// the dead waiter's place is gone.
func TestTryLockYieldsToQueue(t *testing.T) {
	rdb := standalone(t)
	l, _ := newTestLocker(t, rdb, nil)
	for _, alive := range []bool{true, false} {
		k := testKey(t)
		lk := redisx.LockKey(DefaultPrefix, k)
		life := time.Minute
		if !alive {
			life = time.Millisecond
		}
		queueGhost(t, rdb, lk, strings.Repeat("e", 32), life)
		time.Sleep(20 * time.Millisecond)
		lease, err := l.TryLock(testCtx(t), k)
		switch {
		case alive && !errors.Is(err, lock.ErrHeld):
			t.Errorf("TryLock with a live waiter queued: err = %v, want ErrHeld", err)
		case !alive && err != nil:
			t.Errorf("TryLock with a dead waiter queued: %v", err)
		case !alive:
			if n := queueLen(t, rdb, lk); n != 0 {
				t.Errorf("dead waiter still queued after TryLock took the key (%d in the queue)", n)
			}
			lease.Unlock(testCtx(t))
		}
		rdb.Del(testCtx(t), lk, waitQueue(lk))
	}
}

// A release naming a queued owner on the inbox wakes that owner's waiter
// only; "" on the key's channel wakes every waiter.
func TestReleaseWakesOnlyTheFirst(t *testing.T) {
	rdb := standalone(t)
	d := testDriver(rdb, DefaultPrefix)
	defer d.Close()
	ctx := testCtx(t)
	lk := d.LockKey(testKey(t))
	owners := []string{strings.Repeat("a", 32), strings.Repeat("b", 32), strings.Repeat("c", 32)}
	var (
		cs []chan struct{}
		ws []*redisx.Waiter
	)
	for _, o := range owners {
		c := make(chan struct{}, 1)
		w, err := d.Notify.Queue(lk, o, c)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		cs, ws = append(cs, c), append(ws, w)
	}
	for deadline := time.Now().Add(2 * time.Second); !ws[1].Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("subscriptions of a queued waiter never confirmed")
		}
	}
	for _, c := range cs { // drop the confirmations' wake-ups
		received(c, 100*time.Millisecond)
	}
	rdb.Publish(ctx, ws[1].Inbox(), owners[1])
	if !received(cs[1], time.Second) {
		t.Fatalf("the named waiter was not woken")
	}
	for _, i := range []int{0, 2} {
		if received(cs[i], 100*time.Millisecond) {
			t.Errorf("waiter %d woken by a release naming another", i)
		}
	}
	rdb.Publish(ctx, channel(lk), "")
	for i, c := range cs {
		if !received(c, time.Second) {
			t.Errorf("waiter %d not woken by a release naming no one", i)
		}
	}
}

// A waiter behind another on a held key makes one round trip a driver.Heartbeat
// (its renewal) and no attempt: only a release that names it, a free key
// or its own expiry makes it try.
func TestQueuedHeartbeatIsOneRoundTrip(t *testing.T) {
	rdb := standalone(t)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	holder, _ := newTestLocker(t, rdb, nil)
	held, err := holder.TryLock(testCtx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	queueGhost(t, rdb, lk, strings.Repeat("f", 32), time.Minute) // first in line
	c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { c.Close() })
	rec := &recorder{}
	addHook(c, rec)
	l, _ := newTestLocker(t, c, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, k)
		done <- err
	}()
	if !eventually(5*time.Second, func() bool { return queueLen(t, rdb, lk) == 2 }) {
		t.Fatalf("waiter not queued")
	}
	time.Sleep(100 * time.Millisecond)
	rec.take() // the attempts that queued it
	time.Sleep(2*driver.Heartbeat + 300*time.Millisecond)
	trips := rec.take()
	cancel()
	<-done
	if len(trips) == 0 {
		t.Fatalf("no round trip in two heartbeats; want the renewals")
	}
	for _, trip := range trips {
		if trip != "set pexpire get pttl" {
			t.Errorf("round trip %q in a driver.Heartbeat; want only renewals (set pexpire get pttl)", trip)
		}
	}
	held.Unlock(testCtx(t))
	rdb.Del(testCtx(t), lk, waitQueue(lk))
}
