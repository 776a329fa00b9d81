package drivertest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C7: a waiting Lock returns promptly when its context is cancelled or
// times out, with both ErrNotAcquired and the context's error, and leaves
// nothing on the backend.
func testCancelWaiting(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	held := mustLock(t, a, k)
	for _, tc := range []struct {
		name string
		make func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			return c, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		c, cancel := tc.make()
		start := time.Now()
		ends := newCanary(start.Add(300 * time.Millisecond))
		_, err := b.Lock(c, k)
		cancel()
		checkBy(t, ends, time.Now(), time.Second, "%s: Lock returned %v after the context ended at 300ms", tc.name, time.Since(start))
		if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want ErrNotAcquired and %v", tc.name, err, tc.want)
		}
	}
	if err := held.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	assertNoResidue(t, h, k)
}

// C7: many waiters cancelled at random moments leave nothing behind, and
// the key is free soon after the holder releases it.
func testCancelManyWaiters(t *testing.T, h Harness) {
	a := h.NewLocker(t, nil)
	waiters := []*lock.Locker{h.NewLocker(t, nil), h.NewLocker(t, nil)}
	k := key(t)
	held := mustLock(t, a, k)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(400))*time.Millisecond)
			defer cancel()
			_, err := waiters[i%2].Lock(c, k)
			if !errors.Is(err, lock.ErrNotAcquired) || c.Err() == nil || !errors.Is(err, c.Err()) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("cancelled waiter: err = %v, want ErrNotAcquired and the context's error", err)
	}
	if err := held.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	assertNoResidue(t, h, k)
	// A waiter's attempt under way at its context's end may grant after
	// it (on a loaded machine, after the holder left): lock releases such
	// a grant in the background, so the key is free soon, not at once.
	assertFreeBy(t, waiters[0], k, time.Now().Add(time.Second), "after every waiter was cancelled and the holder left")
}
