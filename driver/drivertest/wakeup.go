package drivertest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C10: a waiter gets the key soon after a release: within a second for
// drivers that are notified, within two seconds for those that poll. Each
// of five hand-offs is judged: the bounds are many times what a hand-off
// takes (a few round trips; DefaultRetry's 250 ms cap for a poller), so
// that a slow machine passes and a waiter that sleeps through a release
// does not.
func testWakeUp(t *testing.T, h Harness) {
	bound := 2 * time.Second
	if h.Caps().Notify {
		bound = time.Second
	}
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	var lat []time.Duration
	for range 5 {
		held := mustLock(t, a, k)
		got := make(chan time.Time, 1)
		go func() {
			l, err := b.Lock(ctx(t, 30*time.Second), k)
			got <- time.Now()
			if err != nil {
				t.Errorf("waiter: %v", err)
				return
			}
			l.Unlock(ctx(t, 10*time.Second))
		}()
		time.Sleep(300 * time.Millisecond) // the waiter is waiting
		if err := held.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		released := time.Now()
		c := newCanary(released)
		select {
		case at := <-got:
			d := at.Sub(released)
			lat = append(lat, d)
			checkBy(t, c, at, bound, "hand-off %d: release-to-grant %v; want within %v", len(lat), d, bound)
		case <-time.After(bound + 5*time.Second):
			t.Fatalf("waiter not granted within %v of the release", bound+5*time.Second)
		}
	}
	slices.Sort(lat)
	t.Logf("release-to-grant: median %v, max %v", lat[len(lat)/2], lat[len(lat)-1])
}

// C11: errors wrap the sentinels and the key.
func testErrors(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	lease := mustLock(t, a, k)
	_, err := b.TryLock(ctx(t, 10*time.Second), k)
	var le *lock.Error
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.As(err, &le) || le.Key != k || !strings.Contains(err.Error(), k) {
		t.Errorf("TryLock on held key: err = %v, want a *lock.Error with the key, wrapping ErrNotAcquired", err)
	}
	if err := lease.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	err = lease.Unlock(ctx(t, 10*time.Second))
	if !errors.Is(err, lock.ErrNotHeld) || !strings.Contains(err.Error(), k) {
		t.Errorf("second Unlock: err = %v, want ErrNotHeld naming the key", err)
	}
	if err := lease.Refresh(ctx(t, 10*time.Second), time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Refresh after Unlock: err = %v, want ErrNotHeld", err)
	}
	if lease.Err() == nil {
		t.Errorf("Err() = nil after Unlock")
	}
}
