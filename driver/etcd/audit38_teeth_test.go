package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit38QueuedGrantTTL: a waiter queued with a 10 s TTL waits on a
// 3 s lease (waitSeconds); its grant must move the entry to a lease of
// the grant's TTL, so that, renewal off, nobody else is granted the key
// before the grant's deadline.
func TestAudit38QueuedGrantTTL(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix}
	a := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	b := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	c := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := "queued-grant-ttl"
	la, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, k, lock.WithTTL(10*time.Second), lock.WithDisableAutoRenew(true))
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	time.Sleep(time.Second) // b queues
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-granted
	if lb == nil {
		t.FailNow()
	}
	deadline := lb.Deadline()
	// Until a little before the deadline (the grant's clock and etcd's
	// may differ by the lease's rounding), nobody else gets the key.
	for time.Until(deadline) > 500*time.Millisecond {
		lc, err := c.TryLock(ctx, k)
		if err == nil {
			left := time.Until(deadline)
			lc.Unlock(ctx)
			if left <= 0 {
				break // a TryLock slower than the margin: the machine, not the lease
			}
			t.Fatalf("another client was granted the key %v before the queued 10 s grant's deadline", left.Round(time.Millisecond))
		}
		if !errors.Is(err, lock.ErrHeld) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAudit38CounterAhead: tokens are max(counter + 1, clock); a counter
// moved ahead of the clock (an operator's write, a client with a fast
// clock) must be followed: the next tokens, by TryLock and by a queued
// grant, are above it and keep rising, which they do only if every grant
// writes the counter.
func TestAudit38CounterAhead(t *testing.T) {
	e := testserver.SharedEtcd(t)
	h := newHarness(t, e.Endpoints())
	a := h.NewLocker(t, nil)
	b := h.NewLocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := "counter-ahead"
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	if _, err := h.raw.Put(ctx, h.names(k).counter, strconv.FormatUint(ahead, 10)); err != nil {
		t.Fatal(err)
	}
	last := ahead
	next := func(how string, l *lock.Lease, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("%s: token %d, not above %d (the counter set a day ahead of the clock was %d)", how, l.Token(), last, ahead)
		}
		last = l.Token()
	}
	for range 2 {
		l, err := a.TryLock(ctx, k)
		next("TryLock", l, err)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	la, err := a.Lock(ctx, k)
	next("Lock", la, err)
	queued := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		queued <- l
	}()
	time.Sleep(time.Second)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-queued
	if lb == nil {
		t.FailNow()
	}
	next("a queued grant", lb, nil)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := a.TryLock(ctx, k)
	next("TryLock after the queued grant", l, err)
	l.Unlock(ctx)
}
