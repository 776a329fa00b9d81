package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// TestJoinHeldIsNotRidden: a Join that finds the key held is the
// server's answer, not a connection failure: its *driver.HeldError says
// when the holder's grant expires, and the wait is not counted as riding
// out an outage. (Ridden, every queued Lock stepped again 100 ms after
// its Join, one wasted step on the key's row per wait, and a wait longer
// than rideOut before a Check would have been ended as an outage.) A
// TryLock's Acquire of a held key is not marked unavailable either.
func TestJoinHeldIsNotRidden(t *testing.T) {
	ctx := tctx(t, time.Minute)
	d := rowDriver(t, serverURL(t))
	key := auditKey("join-held")
	a := rowLease(key, 1, 20*time.Second)
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	w := rowLease(key, 2, 10*time.Second)
	err := d.Join(ctx, w, make(chan struct{}, 1))
	var he *driver.HeldError
	if !errors.As(err, &he) || he.RetryAfter < 10*time.Second {
		t.Fatalf("a Join behind a grant of 20 s: %v; want held, free in more than 10 s (not rideRetry)", err)
	}
	d.rides.mu.Lock()
	_, riding := d.rides.failing[w.Owner]
	d.rides.mu.Unlock()
	if riding {
		t.Error("a Join that found the key held counts as riding out a connection failure")
	}
	c := rowLease(key, 3, 10*time.Second)
	if err := d.Acquire(ctx, c); !isHeld(err) || errors.Is(err, driver.ErrUnavailable) {
		t.Errorf("an Acquire of the held key: %v; want held, not unavailable", err)
	}
}
