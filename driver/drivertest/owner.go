package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C2: after A's grant expired and B took the key, A's Refresh and Unlock
// return ErrNotHeld and B's grant is untouched.
func testOwnerCheckedAfterExpiry(t *testing.T, h Harness) {
	if h.Caps().SessionBound {
		t.Skip("grants live as long as the session, not a TTL; OwnerCheckedAfterTakeover covers C2")
	}
	ttl := h.Caps().ttl()
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	la := mustLock(t, a, k, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
	lb, err := b.Lock(ctx(t, ttl+5*time.Second), k)
	if err != nil {
		t.Fatalf("B could not take the key after A's TTL: %v", err)
	}
	if !closedWithin(la.Done(), 0) {
		t.Errorf("A's Done is still open after B was granted the key")
	}
	if err := la.Refresh(ctx(t, 10*time.Second), ttl); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("A.Refresh after expiry: err = %v, want ErrNotHeld", err)
	}
	if err := la.Unlock(ctx(t, 10*time.Second)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("A.Unlock after expiry: err = %v, want ErrNotHeld", err)
	}
	assertHeld(t, c, k, "B's grant after A's Unlock")
	if err := lb.Refresh(ctx(t, 10*time.Second), ttl); err != nil {
		t.Errorf("B.Refresh: %v", err)
	}
	if err := lb.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Errorf("B.Unlock: %v", err)
	}
}

// C2: A still believes it holds the key (its local deadline is far), but its
// grant was deleted behind its back and B was granted the key. A's Refresh
// and Unlock must reach the backend, find the grant is not theirs, and leave
// B's alone.
func testOwnerCheckedAfterTakeover(t *testing.T, h Harness) {
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	long := 60 * time.Second
	for _, op := range []string{"Refresh", "Unlock"} {
		k := key(t)
		la := mustLock(t, a, k, lock.WithTTL(long), lock.WithDisableAutoRenew(true))
		if err := h.DeleteKey(ctx(t, 10*time.Second), k); err != nil {
			t.Fatalf("DeleteKey: %v", err)
		}
		lb, err := b.Lock(ctx(t, 10*time.Second), k)
		if err != nil {
			t.Fatalf("B.Lock after the grant was deleted: %v", err)
		}
		if op == "Refresh" {
			err = la.Refresh(ctx(t, 10*time.Second), long)
		} else {
			err = la.Unlock(ctx(t, 10*time.Second))
		}
		if !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("A.%s on a key re-granted to B: err = %v, want ErrNotHeld", op, err)
		}
		if !closedBy(t, la.Done(), time.Second) {
			t.Errorf("A.%s found the grant gone but A's Done stayed open", op)
		}
		assertHeld(t, c, k, "B's grant after A."+op)
		if err := lb.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Errorf("B.Unlock: %v", err)
		}
	}
}

// assertHeld fails unless k is held: a TryLock through l must fail.
func assertHeld(t *testing.T, l *lock.Locker, k, what string) {
	t.Helper()
	lease, err := l.TryLock(ctx(t, 10*time.Second), k)
	if err == nil {
		lease.Unlock(ctx(t, 10*time.Second))
		t.Errorf("%s is gone: another Locker could take the key", what)
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLock: %v", err)
	}
}

// assertFree fails unless k can be taken at once through l.
func assertFree(t *testing.T, l *lock.Locker, k, what string) {
	t.Helper()
	lease, err := l.TryLock(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Errorf("%s: key not free: %v", what, err)
		return
	}
	lease.Unlock(ctx(t, 10*time.Second))
}

// assertFreeBy fails unless k can be taken through l before by: it tries
// every 100 ms, and longer on a starved machine (see awaitBy).
func assertFreeBy(t *testing.T, l *lock.Locker, k string, by time.Time, what string) {
	t.Helper()
	c := newCanary(by)
	for {
		lease, err := l.TryLock(ctx(t, 10*time.Second), k)
		if err == nil {
			lease.Unlock(ctx(t, 10*time.Second))
			checkBy(t, c, time.Now(), 0, "%s: key free only %v after its bound", what, time.Since(by))
			return
		}
		if !errors.Is(err, lock.ErrNotAcquired) || past(c) {
			t.Errorf("%s: key not free: %v", what, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assertNoResidue polls Residue for up to a second (longer on a starved
// machine, see awaitBy) and fails if state is left for k.
func assertNoResidue(t *testing.T, h Harness, k string) {
	t.Helper()
	var (
		left []string
		err  error
	)
	for c := newCanary(time.Now().Add(time.Second)); ; {
		left, err = h.Residue(ctx(t, 10*time.Second), k)
		if err != nil {
			t.Fatalf("Residue: %v", err)
		}
		if len(left) == 0 || past(c) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("state left behind on the backend for %q: %q", k, left)
	}
}
