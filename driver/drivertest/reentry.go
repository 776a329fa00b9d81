package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Re-entry: a named owner (lock.WithOwner) that holds a key is granted it
// again at once, through the same Locker or another (another process, as
// far as the backend can tell), with the same fencing token; the backend
// counts the holds, and the key is free only when the last is unlocked.
// Other owners, named or not, are excluded throughout. A driver that keeps
// no holds (Caps.Reentry unset) refuses WithOwner with ErrInvalid.
func testReentryCountsHolds(t *testing.T, h Harness) {
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	if _, err := a.TryLock(ctx(t, 10*time.Second), k, lock.WithOwner("")); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("WithOwner(\"\"): err = %v, want ErrInvalid", err)
	}
	if !h.Caps().Reentry {
		for _, try := range []bool{false, true} {
			var err error
			if try {
				_, err = a.TryLock(ctx(t, 10*time.Second), k, lock.WithOwner("job-1"))
			} else {
				_, err = a.Lock(ctx(t, 10*time.Second), k, lock.WithOwner("job-1"))
			}
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("a named owner on a driver without re-entry (TryLock %v): err = %v, want ErrInvalid", try, err)
			}
		}
		assertFree(t, c, k, "after the refused named Locks")
		assertNoResidue(t, h, k)
		return
	}
	ttl := h.Caps().ttl()
	l1 := mustLock(t, a, k, lock.WithOwner("job-1"), lock.WithTTL(ttl))
	l2, err := a.TryLock(ctx(t, 10*time.Second), k, lock.WithOwner("job-1"), lock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("TryLock re-entry through the same Locker: %v", err)
	}
	l3 := mustLock(t, b, k, lock.WithOwner("job-1"), lock.WithTTL(ttl))
	for i, l := range []*lock.Lease{l2, l3} {
		if l.Token() != l1.Token() {
			t.Errorf("re-entry %d: token %d, want the first hold's %d", i+1, l.Token(), l1.Token())
		}
	}
	assertHeld(t, c, k, "the named owner's grant")
	if l, err := c.TryLock(ctx(t, 10*time.Second), k, lock.WithOwner("job-2")); err == nil {
		l.Unlock(ctx(t, 10*time.Second))
		t.Errorf("another named owner was granted the key beside job-1's three holds")
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLock of another named owner: %v", err)
	}
	// Unlocks count down, in any order; the key stays held until the last.
	for i, l := range []*lock.Lease{l1, l3} {
		if err := l.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Fatalf("Unlock of hold %d: %v", i+1, err)
		}
		if closedWithin(l2.Done(), 0) {
			t.Fatalf("the remaining hold ended: %v", l2.Err())
		}
		assertHeld(t, c, k, "the named owner's grant with holds left")
	}
	// The remaining hold renews the grant on its own.
	time.Sleep(h.Caps().expiryBound(ttl) + 300*time.Millisecond)
	if closedWithin(l2.Done(), 0) {
		t.Fatalf("the last hold ended: %v", l2.Err())
	}
	assertHeld(t, c, k, "the last hold, renewed past its TTL")
	if err := l2.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock of the last hold: %v", err)
	}
	assertFree(t, c, k, "after the last hold's Unlock")
	// A new grant of the same owner starts a new count, with a new token.
	l4 := mustLock(t, b, k, lock.WithOwner("job-1"))
	if l4.Token() <= l1.Token() {
		t.Errorf("a new grant of the named owner: token %d, want more than %d", l4.Token(), l1.Token())
	}
	if err := l4.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	assertFree(t, c, k, "after one Unlock of the new grant")
	assertNoResidue(t, h, k)
}

// A re-entry never shortens the grant the other holds count on: a hold
// with a short TTL, not renewed, expires alone (its Done closes) while the
// first hold keeps the key, and its deadline, until that deadline. The
// short hold, lost at its deadline, is not released (another Lease may
// have resumed it): like a crashed holder's hold it counts until the grant
// expires, so after the first hold's Unlock the key is free by then.
func testReentryShortHold(t *testing.T, h Harness) {
	if !h.Caps().Reentry {
		t.Skip("the driver keeps no holds: CountsHolds checks that it refuses")
	}
	// An attempt proves nothing when the machine was so slow that the
	// first hold is near its own deadline by the time the short one is
	// past its TTL. Such an attempt is retried on a fresh key; a slowness
	// that persists fails the test, so that a hold whose deadline the
	// re-entry pulled in cannot pass as a slow machine.
	const attempts = 3
	for i := 1; ; i++ {
		left, judged := reentryShortHoldOnce(t, h)
		if judged {
			return
		}
		if i == attempts {
			t.Fatalf("%d attempts, each too slow to judge: the first hold's deadline was %v away when the short hold had expired", attempts, left)
		}
		t.Logf("attempt %d too slow to judge (the first hold's deadline %v away); again on a fresh key", i, left)
	}
}

// reentryShortHoldOnce makes one attempt of testReentryShortHold. It
// reports false, with the time left to the first hold's deadline, when
// that was too close to judge.
func reentryShortHoldOnce(t *testing.T, h Harness) (time.Duration, bool) {
	a, c := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	short := h.Caps().ttl()
	long := 3*short + time.Second
	granted := time.Now()
	l1 := mustLock(t, a, k, lock.WithOwner("job"), lock.WithTTL(long), lock.WithDisableAutoRenew(true))
	deadline := l1.Deadline()
	sent := time.Now()
	l2, err := a.TryLock(ctx(t, 10*time.Second), k, lock.WithOwner("job"), lock.WithTTL(short), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if !closedBy(t, l2.Done(), h.Caps().validityBound(short)+time.Second) {
		t.Fatalf("the short hold outlived its TTL")
	}
	// Past the short hold's TTL on the backend too.
	time.Sleep(time.Until(sent.Add(h.Caps().expiryBound(short) + 300*time.Millisecond)))
	if !l1.Deadline().Equal(deadline) {
		t.Errorf("the first hold's deadline moved from %v to %v with a shorter re-entry", deadline, l1.Deadline())
	}
	if left := time.Until(l1.Deadline()); left < 200*time.Millisecond {
		l1.Unlock(ctx(t, 10*time.Second))
		return left, false
	}
	assertHeld(t, c, k, "the first hold, after a shorter re-entry expired")
	if closedWithin(l1.Done(), 0) {
		t.Errorf("the first hold ended with the short one: %v", l1.Err())
	}
	unlocked := time.Now()
	if err := l1.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Errorf("Unlock of the first hold: %v", err)
	}
	// The grant lasts the first hold's TTL from its grant, or (memcached,
	// which sets the longest TTL of the holds left) the short one's from
	// the Unlock.
	expires := unlocked.Add(h.Caps().expiryBound(short))
	if e := granted.Add(h.Caps().expiryBound(long)); e.After(expires) {
		expires = e
	}
	assertFreeBy(t, c, k, expires.Add(time.Second), "after the first hold's Unlock, once the grant expired")
	assertNoResidue(t, h, k)
	return 0, true
}

// A grant lost behind the named owner's back ends every hold (each Done
// closes by its next renewal); the owner's next Lock is a new grant, with a
// new token and a count of one, not a re-entry of the lost holds.
func testReentryLostTogether(t *testing.T, h Harness) {
	if !h.Caps().Reentry {
		t.Skip("the driver keeps no holds: CountsHolds checks that it refuses")
	}
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	ttl := h.Caps().ttl()
	l1 := mustLock(t, a, k, lock.WithOwner("job"), lock.WithTTL(ttl))
	l2 := mustLock(t, b, k, lock.WithOwner("job"), lock.WithTTL(ttl))
	if err := h.DeleteKey(ctx(t, 10*time.Second), k); err != nil {
		t.Fatal(err)
	}
	for i, l := range []*lock.Lease{l1, l2} {
		if !closedBy(t, l.Done(), h.Caps().validityBound(ttl)+time.Second) {
			t.Fatalf("hold %d: Done still open after its grant was deleted", i+1)
		}
		if !errors.Is(l.Err(), lock.ErrLost) {
			t.Errorf("hold %d: Err = %v, want ErrLost", i+1, l.Err())
		}
	}
	l3 := mustLock(t, a, k, lock.WithOwner("job"))
	if l3.Token() <= l1.Token() {
		t.Errorf("the named owner's grant after the loss: token %d, want more than %d", l3.Token(), l1.Token())
	}
	if err := l3.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	assertFree(t, c, k, "after one Unlock of the new grant (the lost holds do not count)")
	assertNoResidue(t, h, k)
}

// Shared leases and Resume take no owner; a hold of a named owner can be
// detached and resumed elsewhere as one hold, with the same token.
func testReentryResume(t *testing.T, h Harness) {
	if !h.Caps().Reentry {
		t.Skip("the driver keeps no holds: CountsHolds checks that it refuses")
	}
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	if a.Supports(lock.SharedLeases) == nil {
		if _, err := a.TryRLock(ctx(t, 10*time.Second), k, lock.WithOwner("job")); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("TryRLock with an owner: err = %v, want ErrInvalid", err)
		}
	}
	l1 := mustLock(t, a, k, lock.WithOwner("job"))
	l2 := mustLock(t, a, k, lock.WithOwner("job"))
	if !h.Caps().Resume {
		l1.Unlock(ctx(t, 10*time.Second))
		l2.Unlock(ctx(t, 10*time.Second))
		return
	}
	if _, err := b.Resume(ctx(t, 10*time.Second), l2.Handle(), lock.WithOwner("job")); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Resume with an owner: err = %v, want ErrInvalid", err)
	}
	handle, err := l2.Detach()
	if err != nil {
		t.Fatalf("Detach of a hold: %v", err)
	}
	lr, err := b.Resume(ctx(t, 10*time.Second), handle)
	if err != nil {
		t.Fatalf("Resume of a hold: %v", err)
	}
	if lr.Token() != l1.Token() {
		t.Errorf("resumed hold: token %d, want %d", lr.Token(), l1.Token())
	}
	if err := l1.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	assertHeld(t, c, k, "the resumed hold")
	if err := lr.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock of the resumed hold: %v", err)
	}
	assertFree(t, c, k, "after both holds' Unlock")
	if _, err := c.Resume(ctx(t, 10*time.Second), handle); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Resume of a released hold: err = %v, want ErrNotHeld", err)
	}
	assertNoResidue(t, h, k)
}
