package drivertest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// TestExampleHookup is a whole hookup as a driver outside this module
// writes one: it uses only the public API, and runs the suite on the memory
// driver reached by its URL scheme, as lock.Open reaches any driver that
// registered one. The memory driver does everything but the outage
// checks: it has no server to stop.
func TestExampleHookup(t *testing.T) {
	drivertest.Run(t, newHarness, drivertest.Skips{
		"Outage/LockWaits":    "no server: a Store cannot be unreachable",
		"Outage/TryLockFails": "no server: a Store cannot be unreachable",
	})
}

var stores atomic.Int64 // names a Store of its own for each subtest

// harness tampers with its Store behind its Lockers' back.
type harness struct {
	url string
	s   *memory.Store
}

func newHarness(t *testing.T) drivertest.Harness {
	h := &harness{url: fmt.Sprintf("memory://drivertest-%d", stores.Add(1))}
	if !h.NewLocker(t, nil).As(&h.s) {
		t.Fatalf("no Store behind a Locker of %s", h.url)
	}
	return h
}

// NewLocker opens h.url with o; lock.OpenWith takes the TTL from ttl=.
func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	u := h.url
	if o != nil && o.TTL != 0 {
		u += "?ttl=" + o.TTL.String()
	}
	l, err := lock.OpenWith(context.Background(), u, o)
	if err != nil {
		t.Fatalf("OpenWith: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (h *harness) Crash(t *testing.T, l *lock.Locker) {
	if err := h.s.Crash(l); err != nil {
		t.Fatal(err)
	}
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
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) { return h.s.Dump(key), nil }

func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{
		Notify: true, Shared: true, DeletableCounter: true, Resume: true, Reentry: true, Permits: true, Notes: true,
		Inspect: &drivertest.InspectCaps{Tokens: true, SharedTokens: true, Remaining: true, Since: true, Waiters: true, WaiterSince: true},
	}
}
