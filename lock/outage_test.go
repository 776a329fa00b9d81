package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// outageFake is a fake whose next grants are applied and their replies
// lost with an error marked driver.ErrUnavailable: a connection that
// broke after the request reached the backend.
type outageFake struct {
	*fake
	lose atomic.Int32 // replies still to lose
}

func (o *outageFake) Acquire(ctx context.Context, l *driver.Lease) error {
	err := o.fake.Acquire(ctx, l)
	if err == nil && o.lose.Add(-1) >= 0 {
		return driver.Unavailable(errLostReply)
	}
	return err
}

// A waiting Lock rides out attempts whose backend was unreachable, and
// each such attempt's grant, applied with its reply lost, is removed by
// its own owner: the grant the Lock returns is the only one, and stays.
func TestOutageLockRetriesWithNewOwner(t *testing.T) {
	f := &outageFake{fake: newFake()}
	f.lose.Store(3)
	l := lock.New(f, nil)
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if n := f.acquires.Load(); n < 4 {
		t.Errorf("%d attempts; want at least 4 (3 lost, then the grant)", n)
	}
	time.Sleep(100 * time.Millisecond) // the clean-ups have run
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost after the outage: %v", err)
	}
	if err := lease.Refresh(bg(t), time.Minute); err != nil {
		t.Fatalf("Refresh: %v (a clean-up took the grant)", err)
	}
	if err := lease.Unlock(bg(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if h := f.holder("k"); h != "" {
		t.Errorf("grant of %s left behind", h)
	}
}

// An outage in which nothing reaches the backend: the clean-ups of the
// failed attempts (releases by owner) fail too and are retried, and those
// that reach the backend after the Lock was granted must not release its
// grant.
func TestOutageCleanupSparesTheGrant(t *testing.T) {
	f := newFake()
	// Releases fail for longer than grants: a clean-up is still being
	// retried when the Lock is granted.
	start := time.Now()
	down := func(d time.Duration) func() error {
		return func() error {
			if time.Since(start) < d {
				return driver.Unavailable(errors.New("dial tcp: connection refused"))
			}
			return nil
		}
	}
	f.setFaults(func(x *faults) { x.acquireErr, x.releaseErr = down(300*time.Millisecond), down(time.Second) })
	l := lock.New(f, nil)
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	time.Sleep(2500 * time.Millisecond) // the clean-ups' retries (20 ms doubling to 1 s) have run
	if err := lease.Refresh(bg(t), time.Minute); err != nil {
		t.Fatalf("Refresh: %v (a clean-up took the grant)", err)
	}
	if err := lease.Unlock(bg(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// A Try call fails at once with ErrUnavailable, not ErrHeld; a Lock
// whose context ends while the backend is unreachable returns the
// context's error, and says the backend was unreachable.
func TestOutageTryLockAndDeadline(t *testing.T) {
	f := newFake()
	unreachable := driver.Unavailable(errors.New("dial tcp: connection refused"))
	f.setFaults(func(x *faults) { x.acquireErr = func() error { return unreachable } })
	l := lock.New(f, nil)
	defer l.Close()
	_, err := l.TryLock(bg(t), "k")
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLock: err = %v; want ErrNotAcquired and ErrUnavailable, not ErrHeld", err)
	}
	if n := f.acquires.Load(); n != 1 {
		t.Errorf("TryLock made %d attempts; want 1", n)
	}
	c, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = l.Lock(c, "k")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Lock: err = %v; want DeadlineExceeded and ErrUnavailable", err)
	}
	// An error not marked unavailable still ends a waiting call at once.
	f.setFaults(func(x *faults) { x.acquireErr = func() error { return errors.New("NOPERM") } })
	start := time.Now()
	if _, err := l.Lock(bg(t), "k"); err == nil || errors.Is(err, lock.ErrUnavailable) || time.Since(start) > 5*time.Second {
		t.Errorf("Lock after a refusal: err = %v after %v; want the refusal, at once", err, time.Since(start))
	}
}
