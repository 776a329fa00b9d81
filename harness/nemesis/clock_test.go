package nemesis

import (
	"testing"
	"time"
)

// TestClockPairsTightly: a process preempted between its time.Now and
// CLOCK_MONOTONIC reads at start would stamp every observation off by the
// preemption; the clock retries until the reads are close.
func TestClockPairsTightly(t *testing.T) {
	var fake int64 = 1_000_000_000 // CLOCK_MONOTONIC, ns
	start := time.Now()
	tries := 0
	now := func() time.Time {
		tries++
		t := start.Add(time.Duration(fake - 1_000_000_000))
		if tries == 1 {
			fake += int64(5 * time.Millisecond) // preempted right after reading time.Now
		}
		return t
	}
	mono := func() int64 { fake += 1000; return fake }
	c := newClock(0, now, mono)
	// The true pairing: time start+x is CLOCK_MONOTONIC 1e9+x (when read
	// without the preemption), so start+10ms is 1.010s.
	want := Stamp(1_000_000_000 + int64(10*time.Millisecond))
	got := c.At(start.Add(10 * time.Millisecond))
	if d := time.Duration(got - want); d < -10*time.Microsecond || d > 10*time.Microsecond {
		t.Fatalf("a stamp is off by %v after a preemption between the clock's first reads", d)
	}
	if tries < 2 {
		t.Fatalf("the clock read time.Now %d times", tries)
	}
}
