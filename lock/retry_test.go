package lock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

func TestNoRetry(t *testing.T) {
	if _, ok := lock.NoRetry().NewBackoff().Next(); ok {
		t.Fatal("NoRetry retried")
	}
}

func TestLinearBackoff(t *testing.T) {
	b := lock.LinearBackoff(7 * time.Millisecond).NewBackoff()
	for range 5 {
		if d, ok := b.Next(); !ok || d != 7*time.Millisecond {
			t.Fatalf("Next() = %v, %v; want 7ms, true", d, ok)
		}
	}
	if d, _ := lock.LinearBackoff(0).NewBackoff().Next(); d != time.Millisecond {
		t.Errorf("LinearBackoff(0) waits %v; want the 1ms floor", d)
	}
}

// Full jitter: every wait is in [1ns, cap of that attempt), the caps double
// up to the maximum, and the waits spread over the whole range.
func TestExponentialBackoffBounds(t *testing.T) {
	const base, maxWait = 4 * time.Millisecond, 64 * time.Millisecond
	s := lock.ExponentialBackoff(base, maxWait)
	caps := []time.Duration{4, 8, 16, 32, 64, 64, 64}
	var sum [7]time.Duration
	const runs = 2000
	for range runs {
		b := s.NewBackoff()
		for i, c := range caps {
			d, ok := b.Next()
			if !ok {
				t.Fatal("gave up")
			}
			if d <= 0 || d > c*time.Millisecond {
				t.Fatalf("attempt %d: wait %v outside (0, %v]", i, d, c*time.Millisecond)
			}
			sum[i] += d
		}
	}
	for i, c := range caps {
		mean := sum[i] / runs
		want := c * time.Millisecond / 2
		if mean < want*8/10 || mean > want*12/10 {
			t.Errorf("attempt %d: mean wait %v, want about %v (uniform over [0, %v))", i, mean, want, c*time.Millisecond)
		}
	}
}

// Each call gets its own state: a fresh Backoff starts at base again, and a
// limit is per call, not shared.
func TestBackoffStateIsPerCall(t *testing.T) {
	s := lock.LimitRetry(lock.ExponentialBackoff(time.Millisecond, time.Second), 3)
	a := s.NewBackoff()
	for range 3 {
		if _, ok := a.Next(); !ok {
			t.Fatal("first backoff gave up early")
		}
	}
	if _, ok := a.Next(); ok {
		t.Fatal("LimitRetry(3) allowed a fourth retry")
	}
	b := s.NewBackoff()
	d, ok := b.Next()
	if !ok || d > time.Millisecond {
		t.Fatalf("a second call shares state with the first: Next() = %v, %v", d, ok)
	}
	if _, ok := lock.LimitRetry(lock.LinearBackoff(time.Millisecond), 0).NewBackoff().Next(); ok {
		t.Error("LimitRetry(0) retried")
	}
}
