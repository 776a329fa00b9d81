package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// A Try call on a backend that takes its request and does not answer
// (a paused server) fails after tryAnswerBound (5 s) with ErrNotAcquired
// and ErrUnavailable, not at its context's end; the grant that lands after
// the bound is released in the background, and a second caller's grant
// made meanwhile is the only one.
func TestTryLockNoAnswer(t *testing.T) {
	f := newFake()
	f.setFaults(func(x *faults) { x.acquireSlow = 7 * time.Second })
	l := lock.New(f, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(bg(t), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := l.TryLock(ctx, "k")
	took := time.Since(start)
	t.Logf("TryLock: %v after %v", err, took)
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLock on a backend that does not answer: %v; want ErrNotAcquired and ErrUnavailable, not ErrHeld", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 5s") {
		t.Errorf("TryLock: %v; want \"no answer within 5s\", not the context's end", err)
	}
	if took < 5*time.Second || took > 15*time.Second {
		t.Errorf("TryLock took %v; want about 5s", took)
	}
	// The late grant lands at 7 s, after this one: it finds the key held.
	f.setFaults(func(x *faults) { x.acquireSlow = 0 })
	lease, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock after the bound: %v", err)
	}
	waitFor(t, 20*time.Second, func() bool { return f.acquires.Load() == 2 && time.Since(start) > 8*time.Second })
	if err := lease.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("Refresh after the late attempt: %v; want the second TryLock's grant intact", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// A grant that lands after the bound, on a free key, is released in the
// background, long before its TTL.
func TestTryLockNoAnswerLateGrantReleased(t *testing.T) {
	f := newFake()
	f.setFaults(func(x *faults) { x.acquireSlow = 6 * time.Second })
	l := lock.New(f, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(bg(t), time.Minute)
	defer cancel()
	_, err := l.TryLock(ctx, "k", lock.WithTTL(time.Minute))
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("TryLock: %v; want ErrUnavailable", err)
	}
	waitFor(t, 20*time.Second, func() bool { return f.releases.Load() > 0 && f.holder("k") == "" })
}

// waitFor polls cond until it holds, or fails t after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %v", d)
		}
	}
}
