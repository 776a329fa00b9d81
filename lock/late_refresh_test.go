package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// lateRefresher is the memory driver with one Refresh (when armed) that
// returns after its context ended: a reply that came just too late. It
// counts the Refresh calls that reach the driver.
type lateRefresher struct {
	driver.Driver
	armed     atomic.Bool
	returned  chan struct{} // closed when the late Refresh has returned
	refreshes atomic.Int64
}

func (d *lateRefresher) Capabilities() driver.Caps {
	return driver.Caps{ReturnsAtContextEnd: true}
}

func (d *lateRefresher) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	d.refreshes.Add(1)
	if !d.armed.CompareAndSwap(true, false) {
		return d.Driver.Refresh(ctx, l, ttl)
	}
	defer close(d.returned)
	<-ctx.Done()
	time.Sleep(20 * time.Millisecond)
	return d.Driver.Refresh(context.Background(), l, ttl) // applied, but after the caller's end
}

// TestAudit38LateInlineRefreshFreesSlot: a ReturnsAtContextEnd driver's Refresh that
// returns after its context ended frees the lease's refresh slot, and
// renewal goes on: the lease is still held several TTLs later and the
// scheduler keeps refreshing it. If the late call is not cleaned up, the
// slot stays taken, every renewal is skipped and the lease is lost at its
// deadline.
func TestAudit38LateInlineRefreshFreesSlot(t *testing.T) {
	const ttl = time.Second
	s := memory.NewStore()
	inner := memory.New(s, nil)
	d := &lateRefresher{Driver: lock.DriverOf(inner), returned: make(chan struct{})}
	inner.Close()
	l := lock.New(d, &lock.Options{TTL: ttl})
	defer l.Close()
	lease, err := l.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	d.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := lease.Refresh(ctx, ttl); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh whose reply came after its context's end: err = %v, want DeadlineExceeded", err)
	}
	select {
	case <-d.returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the late Refresh never returned")
	}
	before := d.refreshes.Load()
	// Four TTLs: renewals come every third of one, so a dozen are due; the
	// lease's deadline passes four times over if none is made.
	if closedWithin(lease.Done(), 4*ttl) {
		t.Fatalf("lease lost after a Refresh returned late: %v (renewals after it: %d)", lease.Err(), d.refreshes.Load()-before)
	}
	if n := d.refreshes.Load() - before; n < 2 {
		t.Errorf("%d renewals in the %v after a Refresh returned late; want them to go on (a dozen are due)", n, 4*ttl)
	}
	if err := lease.Refresh(context.Background(), ttl); err != nil {
		t.Errorf("Refresh after the late one: %v", err)
	}
}
