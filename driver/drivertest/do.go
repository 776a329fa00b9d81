package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// lock.Do gives fn a context that carries its lease (lock.LeaseFrom),
// cancels it when the lease is lost, and reports the loss even though fn
// returned nil.
func testDoCancelsOnLoss(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	a, b := h.NewLocker(t, &lock.Options{TTL: ttl}), h.NewLocker(t, nil)
	k := key(t)
	ran := false
	err := a.Do(ctx(t, 30*time.Second), k, func(c context.Context) error {
		ran = true
		assertHeld(t, b, k, "Do's lease")
		if ls := lock.LeaseFrom(c); ls == nil || ls.Key() != k || ls.Token() == 0 || ls.Err() != nil {
			t.Errorf("lock.LeaseFrom(fn's ctx) = %v; want Do's held lease of %q with its token", ls, k)
		}
		if err := h.DeleteKey(ctx(t, 10*time.Second), k); err != nil {
			t.Fatalf("DeleteKey: %v", err)
		}
		if !closedBy(t, c.Done(), ttl+2*time.Second) {
			t.Errorf("fn's context not cancelled after the lease was lost")
		} else if !errors.Is(context.Cause(c), lock.ErrLost) {
			t.Errorf("fn's context cause = %v, want ErrLost", context.Cause(c))
		}
		return nil
	})

	if !ran {
		t.Fatalf("fn did not run: %v", err)
	}
	if !errors.Is(err, lock.ErrLost) {
		t.Errorf("Do: err = %v, want ErrLost", err)
	}
	// The ordinary path: fn's error comes back and the key is released.
	want := errors.New("fn failed")
	if err := a.Do(ctx(t, 30*time.Second), k, func(context.Context) error { return want }); !errors.Is(err, want) {
		t.Errorf("Do: err = %v, want fn's error", err)
	}
	assertFree(t, b, k, "after Do returned")
}
