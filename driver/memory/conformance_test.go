package memory

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/lock"
)

// The memory driver does all the suite checks: no subtest may skip.
func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return &harness{s: NewStore()} }, nil)
}

type harness struct{ s *Store }

func (h *harness) NewLocker(t *testing.T, o *lock.Options) lock.Locker {
	l := lock.New(&crashable{memDriver: &memDriver{s: h.s}}, o)
	t.Cleanup(func() { l.Close() })
	return l
}

// Crash cuts the Locker off from the Store, as a dead process is cut off
// from a server: every later call fails, nothing is released.
func (h *harness) Crash(t *testing.T, l lock.Locker) {
	var c *crashable
	if !lock.As(l, &c) {
		t.Fatalf("not a Locker of this harness")
	}
	c.dead.Store(true)
}

func (h *harness) DeleteKey(ctx context.Context, key string) error { h.s.DeleteKey(key); return nil }
func (h *harness) StealKey(ctx context.Context, key string) error {
	h.s.StealKey(key, time.Minute)
	return nil
}
func (h *harness) DeleteCounter(ctx context.Context, key string) error {
	h.s.DeleteCounter(key)
	return nil
}
func (h *harness) Residue(ctx context.Context, key string) ([]string, error) {
	return h.s.Entries(key), nil
}
func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{Notify: true, Shared: true, DeletableCounter: true, Resume: true, Reentry: true, Semaphore: true, Inspect: inspectCaps}
}

// crashable is the memory driver with a switch that makes it behave like a
// process that died: every call fails as a lost connection would.
type crashable struct {
	*memDriver
	dead atomic.Bool
}

var errDead = errors.New("connection lost (crashed by the test)")

func (c *crashable) As(target any) bool {
	if p, ok := target.(**crashable); ok {
		*p = c
		return true
	}
	return c.memDriver.As(target)
}

func (c *crashable) Acquire(ctx context.Context, l *driver.Lease) error {
	if c.dead.Load() {
		return errDead
	}
	return c.memDriver.Acquire(ctx, l)
}

func (c *crashable) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	if c.dead.Load() {
		return errDead
	}
	return c.memDriver.Join(ctx, l, wake)
}

func (c *crashable) Check(ctx context.Context, l *driver.Lease) error {
	if c.dead.Load() {
		return errDead
	}
	return c.memDriver.Check(ctx, l)
}

// Leave goes through even when dead: a crashed waiter's entry dies on
// the network backends, and the Store has no entry expiry of its own.
func (c *crashable) Leave(ctx context.Context, l *driver.Lease) error {
	return c.memDriver.Leave(ctx, l)
}

func (c *crashable) Release(ctx context.Context, l *driver.Lease) error {
	if c.dead.Load() {
		return errDead
	}
	return c.memDriver.Release(ctx, l)
}

func (c *crashable) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	if c.dead.Load() {
		return 0, errDead
	}
	return c.memDriver.Refresh(ctx, l, ttl)
}
