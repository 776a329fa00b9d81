package drivertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C6: a grant deleted behind the holder's back closes Done within one
// renewal period plus slack (3s), with ErrLost.
func testDoneOnDelete(t *testing.T, h Harness) {
	testDoneOnTamper(t, h, "deleted", h.DeleteKey)
}

// C6: a grant overwritten by another owner closes Done likewise, and the
// holder's Unlock then leaves the other owner's grant alone.
func testDoneOnSteal(t *testing.T, h Harness) {
	testDoneOnTamper(t, h, "stolen", h.StealKey)
}

func testDoneOnTamper(t *testing.T, h Harness, what string, tamper func(context.Context, string) error) {
	ttl := h.Caps().ttl()
	a, b := h.NewLocker(t, &lock.Options{TTL: ttl}), h.NewLocker(t, nil)
	k := key(t)
	lease := mustLock(t, a, k)
	if err := tamper(ctx(t, 10*time.Second), k); err != nil {
		t.Fatalf("tampering: %v", err)
	}
	// One renewal period plus a generous slack: a ZooKeeper ensemble may
	// answer the renewal's read from a follower that has not yet applied
	// another session's delete. A driver that does not check ownership on
	// refresh never closes Done at all.
	bound := ttl/3 + 3*time.Second
	if !closedBy(t, lease.Done(), bound) {
		t.Fatalf("Done still open %v after the grant was %s", bound, what)
	}
	if err := lease.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", err)
	}
	if err := lease.Unlock(ctx(t, 10*time.Second)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock of a lost lease: err = %v, want ErrNotHeld", err)
	}
	if what == "stolen" {
		assertHeld(t, b, k, "the other owner's grant")
		h.DeleteKey(ctx(t, 10*time.Second), k)
	}
}

// C6: when the holder's process can no longer reach the backend, its Done
// closes before another client is granted the key.
func testDoneBeforeRegrant(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	a, b := h.NewLocker(t, &lock.Options{TTL: ttl}), h.NewLocker(t, nil)
	k := key(t)
	lease := mustLock(t, a, k)
	lostAt := make(chan time.Time, 1)
	go func() {
		<-lease.Done()
		lostAt <- time.Now()
	}()
	h.Crash(t, a)
	lb, err := b.Lock(ctx(t, h.Caps().expiryBound(ttl)+5*time.Second), k)
	grantedAt := time.Now()
	if err != nil {
		t.Fatalf("B.Lock: %v", err)
	}
	defer lb.Unlock(ctx(t, 10*time.Second))
	select {
	case at := <-lostAt:
		if !at.Before(grantedAt) {
			t.Errorf("A's Done closed %v after B was granted the key", at.Sub(grantedAt))
		}
	default:
		t.Errorf("A's Done still open when B was granted the key")
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Errorf("A's Err() = %v, want ErrLost", lease.Err())
	}
}

// C6: without renewal, Done closes at the local deadline, which is before
// TTL has passed since the grant request was sent.
func testDeadlineWithoutRenewal(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	a := h.NewLocker(t, nil)
	k := key(t)
	start := time.Now()
	lease := mustLock(t, a, k, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
	bound := h.Caps().validityBound(ttl)
	if dl := lease.Deadline(); dl.After(start.Add(bound)) || dl.Before(start.Add(bound/2)) {
		t.Errorf("Deadline %v after the request; want within (%v, %v]", dl.Sub(start), bound/2, bound)
	}
	if !doneWithinValidity(t, lease.Done(), lease.Deadline(), start, bound) {
		t.Fatalf("Done still open %v after the grant, with renewal off", bound+time.Second)
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
}

// doneWithinValidity waits for done, due at deadline, and judges it: it
// must close no later than bound after start, the request of a grant of
// validity bound, unless the machine was starved then (see checkBy). It
// reports false if done is still open a second after that.
func doneWithinValidity(t reporter, done <-chan struct{}, deadline, start time.Time, bound time.Duration) bool {
	t.Helper()
	c, slack := newCanary(deadline), start.Add(bound).Sub(deadline)
	at, ok := awaitBy(done, c, slack+time.Second)
	if ok {
		checkBy(t, c, at, slack, "Done closed %v after the request, later than the validity %v", at.Sub(start), bound)
	}
	return ok
}

// C6: a lease's deadline never counts on more than the backend is sure
// to keep the grant, whatever the TTL: for session-bound backends a TTL
// longer than the session timeout gives a deadline within the session
// timeout, and auto-renewal, which follows the deadline, keeps the lease.
func testDeadlineWithinValidity(t *testing.T, h Harness) {
	c := h.Caps()
	ttl := 3 * c.ttl()
	if c.SessionBound {
		ttl = 3 * c.SessionTimeout
	}
	a := h.NewLocker(t, nil)
	k := key(t)
	start := time.Now()
	lease := mustLock(t, a, k, lock.WithTTL(ttl))
	defer lease.Unlock(context.Background())
	bound := c.validityBound(ttl)
	if dl := lease.Deadline(); dl.After(start.Add(bound)) {
		t.Fatalf("TTL %v: Deadline %v after the request; want at most %v", ttl, dl.Sub(start), bound)
	}
	m := startMeter()
	lost := closedWithin(lease.Done(), bound*3/2)
	worst := m.end()
	if lost {
		// Renewals come a third of the way to the deadline: a stall of
		// the other two thirds loses the lease on any library.
		if what := fmt.Sprintf("auto-renewed lease ended within %v: %v", bound*3/2, lease.Err()); !stalled(t, worst, bound*2/3, what) {
			t.Fatal(what)
		}
		return
	}
	if dl := lease.Deadline(); dl.After(time.Now().Add(bound)) {
		t.Errorf("after renewals, Deadline %v ahead; want at most %v", time.Until(dl), bound)
	}
}

// C6: a waiter that waited longer than its TTL still gets a whole lease:
// the validity of a grant made after a long wait (a queued wait included)
// is counted from the grant, not from the start of the Lock call, so its
// deadline lies ahead and Done stays open.
func testLongWaitFullLease(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	a, b := h.NewLocker(t, &lock.Options{TTL: ttl}), h.NewLocker(t, &lock.Options{TTL: ttl})
	k := key(t)
	la := mustLock(t, a, k)
	go func() {
		time.Sleep(ttl * 3 / 2)
		la.Unlock(context.Background())
	}()
	lb := mustLock(t, b, k)
	defer lb.Unlock(context.Background())
	if left := time.Until(lb.Deadline()); left < 100*time.Millisecond {
		t.Fatalf("granted after a %v wait with TTL %v, the lease's deadline is %v away; want it ahead", ttl*3/2, ttl, left)
	}
	if closedWithin(lb.Done(), 200*time.Millisecond) {
		t.Fatalf("Done closed right after a grant that followed a long wait: %v", lb.Err())
	}
}
