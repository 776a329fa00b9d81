package memory

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// fakeClock makes s tell the time from a clock the test moves, starting at
// base.
func fakeClock(s *Store, base time.Time) *atomic.Int64 {
	var off atomic.Int64
	s.mu.Lock()
	s.now = func() time.Time { return base.Add(time.Duration(off.Load())) }
	s.mu.Unlock()
	return &off
}

// size is the number of keys and counters s keeps.
func (s *Store) size() (keys, counters int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys), len(s.counters)
}

// useOnce uses key once as the i-th of a mixed workload: an exclusive, a
// shared, a permit's and a named owner's lease released; a grant of the
// crashed Locker dead, left to expire; a wait behind a holder given up.
func useOnce(t *testing.T, live, dead *lock.Locker, i int, key string) {
	ctx := context.Background()
	var (
		l   *lock.Lease
		err error
	)
	switch i % 6 {
	case 0:
		l, err = live.Lock(ctx, key)
	case 1:
		l, err = live.RLock(ctx, key)
	case 2:
		l, err = live.Acquire(ctx, key, 3)
	case 3:
		l, err = live.Lock(ctx, key, lock.WithOwner("job"))
	case 4:
		if _, err := dead.Lock(ctx, key); err != nil {
			t.Fatalf("%s: Lock: %v", key, err)
		}
		return // the Locker is crashed below: the grant is left to expire
	case 5:
		holder, err := live.Lock(ctx, key)
		if err != nil {
			t.Fatalf("%s: Lock: %v", key, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		_, werr := live.Lock(wctx, key)
		cancel()
		if !errors.Is(werr, lock.ErrNotAcquired) {
			t.Fatalf("%s: a wait behind a holder gave %v", key, werr)
		}
		l = holder
	}
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("%s: Unlock: %v", key, err)
	}
}

// TestAudit38KeysUsedOnceLeaveNothing: 1,000 keys used once (released,
// expired unreleased, waits given up, permits, shared and named leases)
// leave nothing in the Store once their grants expired, with no call on
// the Store after that: no queue, no counter. Before, every key kept its
// counter for the Store's life, and a key whose grant expired unreleased
// kept its queue until a call touched it again.
func TestAudit38KeysUsedOnceLeaveNothing(t *testing.T) {
	s := NewStore()
	live := New(s, &lock.Options{TTL: time.Minute})
	dead := New(s, &lock.Options{TTL: time.Second})
	defer live.Close()
	defer dead.Close()
	const n = 1000
	for i := range n {
		useOnce(t, live, dead, i, fmt.Sprintf("audit38-once-%d", i))
	}
	if err := s.Crash(dead); err != nil {
		t.Fatal(err)
	}
	// A wait given up leaves the queue in the background; Close waits for
	// that.
	if err := live.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	keys, counters := s.size()
	t.Logf("after use: %d keys, %d counters", keys, counters)
	// The dead Locker's grants expire within their 1 s TTL, and are
	// dropped then, or a second after the last sweep.
	for deadline := time.Now().Add(20 * time.Second); keys+counters > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		keys, counters = s.size()
	}
	if keys > 0 || counters > 0 {
		t.Errorf("%d keys used once left %d keys and %d counters in the Store 20 s later; want none", n, keys, counters)
	}
}

// TestAudit38TokenAboveForgottenCounter: a key whose counter the Store
// forgot gets a larger token than before, even when the clock reads less
// than that counter (it was stepped back, or grants outran it).
func TestAudit38TokenAboveForgottenCounter(t *testing.T) {
	s := NewStore()
	clock := fakeClock(s, time.Unix(1000, 0))
	l := New(s, &lock.Options{TTL: time.Minute, DisableAutoRenew: true})
	defer l.Close()
	ctx := context.Background()
	var last uint64
	for i := range 3 {
		lease, err := l.Lock(ctx, "audit38-token")
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if tok := lease.Token(); tok <= last {
			t.Fatalf("grant %d: token %d after %d", i, tok, last)
		}
		last = lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		clock.Add(int64(-time.Second)) // the clock steps back
	}
}
