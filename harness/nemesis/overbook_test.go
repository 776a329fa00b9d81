package nemesis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// A negative control of this package's own, for TestTeeth: a driver that
// grants one permit too many. It keeps its grants in a memory Locker over
// the run's Store, and asks that Locker for a permit of a semaphore of
// Limit+1 for each permit of Limit it grants, while the leases it grants
// report the Limit asked for: a full semaphore takes one holder more.
// Its exclusive and shared grants are the memory driver's, correct; its
// tokens are the Store's. The checker must find over-limit violations in
// a short run, and nothing tells them apart from a correct driver but
// counting the permits held at once.
func init() {
	targets = append(targets, &Target{
		Name: "ctl-memory-overbook", Broken: "a permit of a full semaphore granted (Limit+1 for the store)", Shared: true, Permits: true, TTL: time.Second,
		LockTTLs: ms(300*time.Millisecond, time.Second, 2*time.Second), RefreshTTLs: ms(100*time.Millisecond, 300*time.Millisecond, time.Second, 3*time.Second),
		Bound: 3 * time.Second, Recovery: time.Second, ReleaseTimeout: time.Second,
		memory: func(store *memory.Store, o lock.Options) lock.Locker {
			inner := memory.New(store, &o)
			return lock.New(&overbook{inner: inner.(lock.SemLocker), held: map[string]*lock.Lease{}}, &o)
		},
	})
}

// overbook is the control's driver: each of its grants is a lease of the
// inner Locker, found by the grant's owner.
type overbook struct {
	inner lock.SemLocker // also a lock.RWLocker

	mu   sync.Mutex
	held map[string]*lock.Lease // by driver.Lease.Owner
}

func (d *overbook) SupportsShared() bool           { return true }
func (d *overbook) Semaphores() error              { return nil }
func (d *overbook) Validate(l *driver.Lease) error { return nil }

func (d *overbook) Acquire(ctx context.Context, l *driver.Lease) error {
	opts := []lock.Option{lock.WithTTL(l.TTL), lock.WithAutoRenew(false)}
	var lease *lock.Lease
	var err error
	switch l.Mode {
	case driver.Exclusive:
		lease, err = d.inner.TryLock(ctx, l.Key, opts...)
	case driver.Shared:
		lease, err = d.inner.(lock.RWLocker).TryRLock(ctx, l.Key, opts...)
	case driver.Permit:
		lease, err = d.inner.TryAcquire(ctx, l.Key, l.Limit+1, opts...) // the bug
	}
	if err != nil {
		return driverError(err)
	}
	d.mu.Lock()
	for owner, h := range d.held { // forget the grants that ended unreleased
		if closed(h.Done()) {
			delete(d.held, owner)
		}
	}
	d.held[l.Owner] = lease
	d.mu.Unlock()
	l.Token, l.Validity = lease.Token(), l.TTL
	return nil
}

func (d *overbook) lease(l *driver.Lease) *lock.Lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held[l.Owner]
}

func (d *overbook) Release(ctx context.Context, l *driver.Lease) error {
	lease := d.lease(l)
	if lease == nil {
		return driver.ErrNotHeld
	}
	err := lease.Unlock(ctx)
	if err == nil || errors.Is(err, lock.ErrNotHeld) {
		d.mu.Lock()
		delete(d.held, l.Owner)
		d.mu.Unlock()
	}
	return driverError(err)
}

func (d *overbook) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	lease := d.lease(l)
	if lease == nil {
		return 0, driver.ErrNotHeld
	}
	if err := lease.Refresh(ctx, ttl); err != nil {
		return 0, driverError(err)
	}
	return ttl, nil
}

func (d *overbook) Close() error { return d.inner.Close() }

// driverError maps the inner Locker's errors to the driver's sentinels.
func driverError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lock.ErrHeld):
		return &driver.HeldError{}
	case errors.Is(err, lock.ErrNotHeld):
		return fmt.Errorf("%w: %v", driver.ErrNotHeld, err)
	case errors.Is(err, lock.ErrInvalid):
		return fmt.Errorf("%w: %v", driver.ErrInvalid, err)
	}
	return err
}
