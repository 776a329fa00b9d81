package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAttemptCleanUps: what an attempt leaves behind is cleaned up in the
// background by the rule of its kind: a queued wait that ends without a
// grant leaves the queue (and releases nothing), whether it failed or its
// caller gave up; a grant that reaches a queued wait after its caller gave
// up is released; a single attempt that found the key held leaves nothing
// to clean up, even when its caller gave up on it.
func TestAttemptCleanUps(t *testing.T) {
	errReset := errors.New("fake: connection reset")
	settled := func(t *testing.T, f *fake, releases, leaves int64) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // the background clean-ups run
		if r, l := f.releases.Load(), f.leaves.Load(); r != releases || l != leaves {
			t.Errorf("%d releases and %d leaves; want %d and %d", r, l, releases, leaves)
		}
	}
	t.Run("a queued wait that fails leaves the queue", func(t *testing.T) {
		f := newFake()
		var waits atomic.Int64
		l := lock.New(queuingFake{f, &waits}, nil)
		defer l.Close()
		f.setFaults(func(x *faults) { x.acquireErr = func() error { return errReset } })
		if _, err := l.Lock(bg(t), "k"); !errors.Is(err, errReset) || !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("Lock: %v; want ErrNotAcquired and the backend's error", err)
		}
		settled(t, f, 0, 1)
	})
	t.Run("a queued wait its caller gave up leaves the queue", func(t *testing.T) {
		f := newFake()
		var waits atomic.Int64
		l := lock.New(queuingFake{f, &waits}, nil)
		defer l.Close()
		if _, err := l.TryLock(bg(t), "k", lock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := l.Lock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock: %v; want the context's end", err)
		}
		settled(t, f, 0, 1)
	})
	t.Run("a queued grant its caller gave up is released", func(t *testing.T) {
		f := newFake()
		var waits atomic.Int64
		l := lock.New(queuingFake{f, &waits}, nil)
		defer l.Close()
		f.setFaults(func(x *faults) { x.acquireSlow = 100 * time.Millisecond })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := l.Lock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock: %v; want the context's end", err)
		}
		settled(t, f, 1, 0)
		if h := f.holder("k"); h != "" {
			t.Errorf("the grant is left on the backend, held by %s", h)
		}
	})
	t.Run("a single attempt its caller gave up on a held key", func(t *testing.T) {
		f := newFake()
		l := lock.New(f, &lock.Options{Retry: lock.LinearBackoff(time.Second)})
		defer l.Close()
		if _, err := l.TryLock(bg(t), "k", lock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		f.setFaults(func(x *faults) { x.acquireSlow = 100 * time.Millisecond })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := l.Lock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock: %v; want the context's end", err)
		}
		settled(t, f, 0, 0)
	})
}
