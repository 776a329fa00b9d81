package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Outage is a backend the suite may take down: Harness reaches a server
// that no other test uses, Stop stops it (every server the Harness's
// Lockers reach), and Start starts it again on the same address and
// returns once it answers. What survives a restart is the backend's
// business: the suite asks only for grants made after it.
type Outage struct {
	Harness Harness
	Stop    func() error
	Start   func() error
}

// The outage rule (lock's package doc, "Failures and time limits"): a
// waiting Lock rides out an outage and is granted once the server is
// back; a Try call fails at once with ErrUnavailable, not ErrHeld; a
// waiting call whose context ends during the outage returns the
// context's error. These bounds are generous: a restart takes seconds on
// a loaded machine.
const (
	outageDown     = 3 * time.Second  // how long the server stays down
	outageLockWait = 60 * time.Second // the waiting Lock's context
	outageTryBound = 15 * time.Second // a Try call fails well within this
	outageTTL      = 5 * time.Second
)

// outage starts the subtest's own server, or skips without one, and
// makes sure the server runs again at cleanup.
func outage(t *testing.T, h Harness) *Outage {
	if h.Caps().Outage == nil {
		t.Skip("Caps.Outage is nil: no server the suite may stop")
	}
	o := h.Caps().Outage(t)
	t.Cleanup(func() {
		if err := o.Start(); err != nil {
			t.Errorf("starting the server again: %v", err)
		}
	})
	return o
}

// Outage/LockWaits: a Lock that starts while the server is down is
// granted after the server is back, with a lease that holds the key, and
// the attempts it made meanwhile leave nothing behind.
func testOutageLockWaits(t *testing.T, h Harness) {
	o := outage(t, h)
	a, b := o.Harness.NewLocker(t, &lock.Options{TTL: outageTTL}), o.Harness.NewLocker(t, &lock.Options{TTL: outageTTL})
	k := key(t)
	warm := mustLock(t, a, k) // both clients connected before the outage
	if err := warm.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := o.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	type result struct {
		lease *lock.Lease
		err   error
		at    time.Time
	}
	done := make(chan result, 1)
	go func() {
		lease, err := a.Lock(ctx(t, outageLockWait), k)
		done <- result{lease, err, time.Now()}
	}()
	time.Sleep(outageDown)
	select {
	case r := <-done:
		t.Fatalf("Lock returned while the server was down: lease %v, err %v", r.lease != nil, r.err)
	default:
	}
	restart := time.Now()
	if err := o.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Lock (context %v, server down for %v, back after %v): %v", outageLockWait, outageDown, time.Since(restart), r.err)
	}
	t.Logf("granted %v after the restart began", r.at.Sub(restart).Round(time.Millisecond))
	if r.at.Before(restart) {
		t.Errorf("granted %v before the restart began", restart.Sub(r.at))
	}
	lease := r.lease
	if lease.Err() != nil || time.Until(lease.Deadline()) <= 0 {
		t.Fatalf("granted lease not valid: Err %v, deadline in %v", lease.Err(), time.Until(lease.Deadline()))
	}
	// b's client reconnects on its own schedule (gRPC's backoff, a
	// pool's redial): until it does, its TryLock rightly says
	// ErrUnavailable. Once it answers, it must say held.
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		_, err = b.TryLock(ctx(t, 30*time.Second), k)
		if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrHeld) || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLock of the granted key: err = %v, want ErrHeld", err)
	}
	// a's client too may not have redialled yet (go-redis's pool answers
	// with its last dial error for up to a second after a run of them):
	// Unlock then fails, and the Locker releases in the background, which
	// the residue check below waits for. Only ErrNotHeld is wrong here.
	if err := lease.Unlock(ctx(t, 10*time.Second)); errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock: %v", err)
	} else if err != nil {
		t.Logf("Unlock: %v (released in the background)", err)
	}
	assertNoResidueBy(t, o.Harness, k, time.Now().Add(h.Caps().expiryBound(outageTTL)+5*time.Second))
}

// Outage/TryLockFails: with the server down, TryLock fails at once with
// ErrUnavailable (not ErrHeld), and a waiting Lock whose context ends
// returns the context's error.
func testOutageTryLockFails(t *testing.T, h Harness) {
	o := outage(t, h)
	l := o.Harness.NewLocker(t, &lock.Options{TTL: outageTTL})
	k := key(t)
	warm := mustLock(t, l, k)
	if err := warm.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := o.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	start := time.Now()
	_, err := l.TryLock(ctx(t, 4*outageTryBound), k)
	took := time.Since(start)
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLock with the server down: err = %v, want ErrNotAcquired and ErrUnavailable, not ErrHeld", err)
	}
	if took > outageTryBound {
		t.Errorf("TryLock with the server down took %v, want well within its context's %v", took, 4*outageTryBound)
	}
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start = time.Now()
	_, err = l.Lock(c, k)
	took = time.Since(start)
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock whose context ends while the server is down: err = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if took > outageTryBound {
		t.Errorf("Lock whose context ends after 2s returned after %v", took)
	}
}

// assertNoResidueBy polls Residue until by and fails if state is left
// for k then. Residue errors are retried: a restarted server may take a
// moment to serve every client.
func assertNoResidueBy(t *testing.T, h Harness, k string, by time.Time) {
	t.Helper()
	var (
		left []string
		err  error
	)
	for {
		left, err = h.Residue(ctx(t, 10*time.Second), k)
		if (err == nil && len(left) == 0) || time.Now().After(by) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	switch {
	case err != nil:
		t.Errorf("Residue: %v", err)
	case len(left) > 0:
		t.Errorf("state left behind on the backend for %q after the outage: %q", k, left)
	}
}
