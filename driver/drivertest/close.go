package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/lock"
)

// C8: Close releases the leases still held, ends them with ErrClosed, and
// makes later calls fail with ErrClosed.
func testCloseReleases(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	keys := []string{key(t), key(t), key(t)}
	var leases []*lock.Lease
	for _, k := range keys {
		leases = append(leases, mustLock(t, a, k))
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, k := range keys {
		if !closedWithin(leases[i].Done(), 0) || !errors.Is(leases[i].Err(), lock.ErrClosed) {
			t.Errorf("lease %d after Close: Done open or Err() = %v, want ErrClosed", i, leases[i].Err())
		}
		assertFree(t, b, k, "key of a closed Locker")
		if err := leases[i].Unlock(ctx(t, time.Second)); !errors.Is(err, lock.ErrClosed) {
			t.Errorf("Unlock after Close: err = %v, want ErrClosed", err)
		}
	}
	if _, err := a.Lock(ctx(t, time.Second), keys[0]); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Lock after Close: err = %v, want ErrClosed", err)
	}
	if _, err := a.TryLock(ctx(t, time.Second), keys[0]); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("TryLock after Close: err = %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: err = %v, want nil (closing twice is harmless)", err)
	}
}

// C8: Close makes a Lock waiting on that Locker return promptly with
// ErrClosed, leaving nothing behind.
func testCloseStopsWaiters(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	held := mustLock(t, a, k)
	var err error
	returned := make(chan struct{})
	go func() {
		_, err = b.Lock(ctx(t, 30*time.Second), k)
		close(returned)
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	bound := newCanary(start.Add(2 * time.Second))
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	checkBy(t, bound, time.Now(), 0, "Close took %v", time.Since(start))
	if _, ok := awaitBy(returned, bound, 0); !ok {
		t.Fatalf("waiting Lock still blocked 2s after Close")
	}
	if !errors.Is(err, lock.ErrClosed) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("waiting Lock after Close: err = %v, want ErrClosed and ErrNotAcquired", err)
	}
	held.Unlock(ctx(t, 10*time.Second))
	assertNoResidue(t, h, k)
}

// C8: once every Locker is closed, none of their goroutines is left: not
// the renewal scheduler, not a waiter, not a subscription.
func testCloseLeaksNoGoroutine(t *testing.T, h Harness) {
	base := leakcheck.Take()
	a, b := h.NewLocker(t, &lock.Options{TTL: h.Caps().ttl()}), h.NewLocker(t, nil)
	k := key(t)
	lease := mustLock(t, a, k)
	waited := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx(t, 30*time.Second), k)
		if err == nil {
			err = l.Unlock(ctx(t, 10*time.Second))
		}
		waited <- err
	}()
	time.Sleep(100 * time.Millisecond)
	lease.Unlock(ctx(t, 10*time.Second))
	if err := <-waited; err != nil {
		t.Errorf("waiter: %v", err)
	}
	mustLock(t, a, key(t)) // still held at Close
	for _, l := range []*lock.Locker{a, b} {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	leakcheck.Verify(t, base)
}
