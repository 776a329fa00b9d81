package drivertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// recorder is a reporter that keeps what a judgement said.
type recorder struct {
	mu         sync.Mutex
	logs, errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// delayed returns a channel closed late after c.
func delayed(c <-chan struct{}, late time.Duration) <-chan struct{} {
	d := make(chan struct{})
	go func() {
		<-c
		time.Sleep(late)
		close(d)
	}()
	return d
}

// TestAudit38CanaryFailsLateDone: C6/DeadlineWithoutRenewal's judgement of
// Done, on a memory lease with renewal off, passes its own Done and fails
// a Done closed 200 ms late: a library late on its own, which the canary,
// firing on time, does not excuse. On a loaded machine too (a canary fires
// a few ms late there, not 50).
func TestAudit38CanaryFailsLateDone(t *testing.T) {
	const ttl = time.Second
	l := memory.New(memory.NewStore(), nil)
	defer l.Close()
	for _, late := range []time.Duration{0, 200 * time.Millisecond} {
		start := time.Now()
		lease, err := l.Lock(context.Background(), fmt.Sprintf("k%v", late), lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		done := lease.Done()
		if late > 0 {
			done = delayed(done, late)
		}
		var r recorder
		if !doneWithinValidity(&r, done, lease.Deadline(), start, ttl) {
			t.Fatalf("Done %v late: never closed", late)
		}
		t.Logf("Done %v late: errors %q, logs %q", late, r.errs, r.logs)
		switch {
		case late == 0 && len(r.errs) > 0:
			t.Errorf("Done on time: judged %q", r.errs)
		case late > 0 && (len(r.errs) != 1 || !strings.Contains(r.errs[0], "later than the validity")):
			t.Errorf("Done %v late: errors %q, logs %q; want it judged late", late, r.errs, r.logs)
		}
	}
}

// TestAudit38Starved: a canary that fired at least a quarter as late as
// the event overran its bound excuses it (the 54 ms overrun of a
// starved run, with a canary 20 ms late); one that fired on time does not
// (a 200 ms overrun with a canary 5 ms late).
func TestAudit38Starved(t *testing.T) {
	for _, c := range []struct {
		over, canary time.Duration
		want         bool
	}{
		{54 * time.Millisecond, 20 * time.Millisecond, true},
		{200 * time.Millisecond, 5 * time.Millisecond, false},
		{200 * time.Millisecond, 50 * time.Millisecond, true},
		{time.Second, 0, false},
	} {
		if got := starved(c.over, c.canary); got != c.want {
			t.Errorf("starved(over %v, canary %v late) = %v, want %v", c.over, c.canary, got, c.want)
		}
	}
}

// TestAudit38AwaitByWaitsOutStarvation: awaitBy gives a channel no extra
// time when its canary fired on time, and waits on while the canary says
// the machine was starved.
func TestAudit38AwaitByWaitsOutStarvation(t *testing.T) {
	never := make(chan struct{})
	onTime := &canary{at: time.Now().Add(50 * time.Millisecond), rang: make(chan struct{})}
	close(onTime.rang)
	start := time.Now()
	if _, ok := awaitBy(never, onTime, 0); ok {
		t.Fatal("awaitBy reported a channel that never closes as closed")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("awaitBy with a canary on time waited %v past a 50 ms bound", d)
	}
	// A canary 100 ms late: a channel closed 300 ms after the bound is
	// waited for (4 x 100 ms).
	starvedC := &canary{at: time.Now().Add(50 * time.Millisecond), rang: make(chan struct{}), late: 100 * time.Millisecond}
	close(starvedC.rang)
	closes := make(chan struct{})
	time.AfterFunc(350*time.Millisecond, func() { close(closes) })
	if _, ok := awaitBy(closes, starvedC, 0); !ok {
		t.Error("awaitBy with a canary 100 ms late gave up before the 400 ms it owes a starved machine")
	}
}

// TestAudit38Meter: a meter on a machine that runs reports a stall far
// shorter than a renewal's margin, and stalled excuses a lost lease only
// for a stall of at least a quarter of that margin.
func TestAudit38Meter(t *testing.T) {
	m := startMeter()
	time.Sleep(200 * time.Millisecond)
	if worst := m.end(); worst < 0 || worst > 500*time.Millisecond {
		t.Errorf("meter over 200 ms: worst stall %v; want within [0, 500ms]", worst)
	}
	var r recorder
	if stalled(&r, 10*time.Millisecond, 2*time.Second, "lease lost") {
		t.Errorf("a 10 ms stall excused a lease lost with a 2 s margin")
	}
	if !stalled(&r, 600*time.Millisecond, 2*time.Second, "lease lost") || len(r.logs) != 1 {
		t.Errorf("a 600 ms stall did not excuse (and log) a lease lost with a 2 s margin: logs %q", r.logs)
	}
}
