package nemesis

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// TestRaceResumeDeadOnArrival: a race's Resume that returned a lease the
// race's Close ended at once (dead on arrival when first observed) took
// the grant with it, as one whose lease lived on does: the Close released
// the grant for both Leases, and another client is granted the key while
// the first Lease's Done is still open. The race must then stop counting
// the first Lease as held (resumeTookGrant), or the checker finds an
// overlap, or permits over the limit, that the contract allows. A failed
// Resume, or a resumed lease detached before the Close, leaves the grant
// to the first Lease.
func TestRaceResumeDeadOnArrival(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := memory.NewStore()
	opts := func() *lock.Options { return &lock.Options{} }
	first, side, other := memory.New(store, opts()), memory.New(store, opts()), memory.New(store, opts())
	defer first.Close()
	defer other.Close()
	orig, err := first.Lock(ctx, "hot/2", lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	resumed, err := side.Resume(ctx, orig.Handle())
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := side.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !closed(resumed.Done()) {
		t.Fatalf("the resumed lease's Done is open after its Locker's Close")
	}
	// The grant went with the Close, while the first Lease looks held.
	next, err := other.TryLock(ctx, "hot/2")
	if err != nil {
		t.Fatalf("TryLock after the resumer's Close: %v (the grant should be gone)", err)
	}
	defer next.Unlock(ctx)
	if closed(orig.Done()) {
		t.Logf("the first Lease's Done closed already (a renewal found the grant gone)")
	}

	// What the race makes of it: resumeOf gives no liveLease for a lease
	// dead on arrival, but says Resume succeeded.
	if !resumeTookGrant(true, nil) {
		t.Errorf("a Resume dead on arrival, then Close: resumeTookGrant false, want true (the grant went with the Close)")
	}
	if resumeTookGrant(false, nil) {
		t.Errorf("a failed Resume: resumeTookGrant true, want false (it changes nothing)")
	}
	live := &liveLease{lease: resumed}
	if !resumeTookGrant(true, live) {
		t.Errorf("a resumed lease ended by Close: resumeTookGrant false, want true")
	}

	// A resumed lease detached before the Close leaves the grant.
	orig2, err := first.Lock(ctx, "hot/3", lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer orig2.Unlock(ctx)
	side2 := memory.New(store, opts())
	twin, err := side2.Resume(ctx, orig2.Handle())
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if _, err := twin.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := side2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if resumeTookGrant(true, &liveLease{lease: twin}) {
		t.Errorf("a resumed lease detached before Close: resumeTookGrant true, want false")
	}
	if l, err := other.TryLock(ctx, "hot/3"); err == nil {
		l.Unlock(ctx)
		t.Errorf("TryLock of a key whose resumed lease was detached before Close succeeded: the grant should be the first Lease's")
	}
}
