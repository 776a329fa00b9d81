package drivertest

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C3: a grant carries its expiry from the start: with renewal off and the
// holder alive, the key is held before its TTL ends and free soon after.
func testGrantCarriesExpiry(t *testing.T, h Harness) {
	if h.Caps().SessionBound {
		t.Skip("grants live as long as the session; AbandonedLeaseExpires covers liveness")
	}
	ttl := h.Caps().ttl()
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	start := time.Now()
	expires := newCanary(start.Add(ttl))
	mustLock(t, a, k, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
	time.Sleep(ttl / 2)
	assertHeld(t, b, k, "a grant at half its TTL")
	lease, err := b.Lock(ctx(t, ttl+5*time.Second), k)
	if err != nil {
		t.Fatalf("key still held after its TTL: %v", err)
	}
	defer lease.Unlock(ctx(t, 10*time.Second))
	checkBy(t, expires, time.Now(), time.Second, "key freed %v after the grant; want within TTL %v plus a second", time.Since(start), ttl)
}

// C4: a holder that dies without unlocking frees the key within its TTL
// (or session timeout), and not much before.
func testAbandonedLeaseExpires(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	bound := h.Caps().expiryBound(ttl)
	a, b := h.NewLocker(t, &lock.Options{TTL: ttl}), h.NewLocker(t, nil)
	k := key(t)
	start := time.Now()
	expires := newCanary(start.Add(bound))
	mustLock(t, a, k)
	h.Crash(t, a)
	time.Sleep(bound / 3)
	assertHeld(t, b, k, "a crashed holder's grant at a third of its lifetime")
	lease, err := b.Lock(ctx(t, bound+5*time.Second), k)
	if err != nil {
		t.Fatalf("key of a crashed holder not freed: %v", err)
	}
	defer lease.Unlock(ctx(t, 10*time.Second))
	checkBy(t, expires, time.Now(), time.Second, "crashed holder's key freed after %v; want within %v plus a second", time.Since(start), bound)
}
