package drivertest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C1: many goroutines on several Lockers contend for one key; a shared
// counter updated without atomics and an overlap detector must show that
// no two of them were ever inside at once.
func testMutualExclusion(t *testing.T, h Harness) {
	const lockers, perLocker, rounds = 3, 3, 8
	k := key(t)
	var (
		inside, overlaps atomic.Int32
		counter          int // guarded by the lock under test only
		wg               sync.WaitGroup
		errs             = make(chan error, lockers*perLocker)
	)
	for range lockers {
		l := h.NewLocker(t, &lock.Options{TTL: h.Caps().ttl()})
		for range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					lease, err := l.Lock(ctx(t, 60*time.Second), k)
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					c := counter
					time.Sleep(200 * time.Microsecond)
					counter = c + 1
					inside.Add(-1)
					if err := lease.Unlock(ctx(t, 10*time.Second)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("contender: %v", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping critical sections", n)
	}
	if want := lockers * perLocker * rounds; counter != want {
		t.Errorf("counter = %d, want %d: updates were lost to overlapping holders", counter, want)
	}
}

// C1: TryLock on a held key fails at once with ErrNotAcquired, from another
// Locker and from the holder's own (leases are not reentrant).
func testTryLockHeld(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	lease := mustLock(t, a, k)
	for name, l := range map[string]*lock.Locker{"other Locker": b, "same Locker": a} {
		start := time.Now()
		bound := newCanary(start.Add(time.Second))
		_, err := l.TryLock(ctx(t, 10*time.Second), k)
		if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
			t.Errorf("%s: TryLock on held key: err = %v, want ErrNotAcquired and ErrHeld", name, err)
		}
		checkBy(t, bound, time.Now(), 0, "%s: TryLock took %v; it must not wait", name, time.Since(start))
	}
	if err := lease.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	l2, err := b.TryLock(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	l2.Unlock(ctx(t, 10*time.Second))
}
