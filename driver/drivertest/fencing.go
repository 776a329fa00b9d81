package drivertest

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C5: tokens strictly increase per key across grants, Lockers and expiry.
func testFencingIncreases(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	var last uint64
	check := func(lease *lock.Lease, what string) {
		t.Helper()
		if tok := lease.Token(); tok <= last {
			t.Errorf("%s: token %d not greater than the previous %d", what, tok, last)
		} else {
			last = tok
		}
	}
	for i := range 6 {
		l := []*lock.Locker{a, b}[i%2]
		lease := mustLock(t, l, k)
		check(lease, "successive grant")
		if err := lease.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	if h.Caps().SessionBound {
		return
	}
	ttl := h.Caps().ttl()
	mustLock(t, a, k, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
	lease, err := b.Lock(ctx(t, ttl+5*time.Second), k)
	if err != nil {
		t.Fatalf("Lock after expiry: %v", err)
	}
	check(lease, "grant after expiry")
	lease.Unlock(ctx(t, 10*time.Second))
}

// C5: when the backend loses the counter (restart without persistence,
// eviction), the next token is still greater: the counter is seeded from
// the backend's clock.
func testFencingAfterCounterLoss(t *testing.T, h Harness) {
	if !h.Caps().DeletableCounter {
		t.Skip("the fencing token is not a deletable backend object")
	}
	a := h.NewLocker(t, nil)
	k := key(t)
	lease := mustLock(t, a, k)
	first := lease.Token()
	lease.Unlock(ctx(t, 10*time.Second))
	if err := h.DeleteCounter(ctx(t, 10*time.Second), k); err != nil {
		t.Fatalf("DeleteCounter: %v", err)
	}
	lease = mustLock(t, a, k)
	defer lease.Unlock(ctx(t, 10*time.Second))
	if lease.Token() <= first {
		t.Errorf("token after counter loss %d is not greater than %d", lease.Token(), first)
	}
}
