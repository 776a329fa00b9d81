package memory

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// NewEarly returns a Locker over s whose grants the Store ends early
// before the validity the driver reports: a backend whose expiry runs
// ahead of the TTL, for the conformance suite's own tests (it must fail
// such a backend).
func NewEarly(s *Store, o *lock.Options, early time.Duration) *lock.Locker {
	return lock.New(&earlyDriver{memDriver: &memDriver{s: s}, early: early}, o)
}

// earlyDriver asks the Store for early less than each TTL, and reports
// the whole TTL as the validity.
type earlyDriver struct {
	*memDriver
	early time.Duration
}

// short makes call with l's TTL cut by early, and adds early back to the
// TTL and to a validity the call granted.
func (d *earlyDriver) short(l *driver.Lease, call func() error) error {
	l.TTL -= d.early
	err := call()
	l.TTL += d.early
	if err == nil {
		l.Validity += d.early
	}
	return err
}

func (d *earlyDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	return d.short(l, func() error { return d.memDriver.Acquire(ctx, l) })
}

func (d *earlyDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	return d.short(l, func() error { return d.memDriver.Join(ctx, l, wake) })
}

func (d *earlyDriver) Check(ctx context.Context, l *driver.Lease) error {
	return d.short(l, func() error { return d.memDriver.Check(ctx, l) })
}

func (d *earlyDriver) Resume(ctx context.Context, l *driver.Lease) error {
	return d.short(l, func() error { return d.memDriver.Resume(ctx, l) })
}

func (d *earlyDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	v, err := d.memDriver.Refresh(ctx, l, ttl-d.early)
	if err == nil {
		v += d.early
	}
	return v, err
}
