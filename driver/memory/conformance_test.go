package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// This hookup is the worked example of docs/design.md, "Writing a driver":
// it uses only the public API, as a driver's hookup outside this module
// would. The memory driver does all the suite checks but the outage ones.
func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return &harness{s: memory.NewStore()} }, skips)
}

// skips: a Store has no server to stop (Caps.Outage is nil).
var skips = drivertest.Skips{
	"Outage/LockWaits":    "no server: a Store cannot be unreachable",
	"Outage/TryLockFails": "no server: a Store cannot be unreachable",
}

// harness runs every Locker of one subtest over one Store, as processes
// share one server, and tampers with the Store directly.
type harness struct{ s *memory.Store }

func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	l := memory.New(h.s, o)
	t.Cleanup(func() { l.Close() })
	return l
}

// Crash cuts the Locker off from the Store, as a dead process is cut off
// from a server: every later call fails, nothing is released.
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

func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	return h.s.Dump(key), nil
}

// Caps: a Store does everything, and knows everything about its grants
// and queue.
func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{
		Notify: true, Shared: true, DeletableCounter: true, Resume: true, Reentry: true, Permits: true,
		Notes:   true,
		Inspect: &drivertest.InspectCaps{Tokens: true, SharedTokens: true, Remaining: true, Since: true, Waiters: true, WaiterSince: true},
	}
}
