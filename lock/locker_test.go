package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/canary"
	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/lock"
)

func bg(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// Renewal runs every TTL/3: over 1.2 s with a 300 ms TTL, about 12
// refreshes (first at ~100 ms), and the lease stays held.
func TestRenewalTiming(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: 300 * time.Millisecond})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(75 * time.Millisecond)
	if n := f.refreshes.Load(); n != 0 {
		t.Errorf("%d refreshes before TTL/4", n)
	}
	time.Sleep(1125 * time.Millisecond)
	n := f.refreshes.Load()
	if n < 8 || n > 16 {
		t.Errorf("%d refreshes in 1.2s with TTL 300ms; want about 12 (every TTL/3)", n)
	}
	if lease.Err() != nil || f.holder("k") == "" {
		t.Errorf("lease lost while renewals succeeded: %v", lease.Err())
	}
	if left := time.Until(lease.Deadline()); left < 150*time.Millisecond || left > 300*time.Millisecond {
		t.Errorf("deadline %v ahead after a renewal; want within (150ms, 300ms]", left)
	}
}

// Renewals that keep failing for a network reason end the lease at its
// local deadline: before TTL has passed since the last grant was sent.
func TestRenewalFailingUntilDeadline(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: 300 * time.Millisecond})
	defer l.Close()
	start := time.Now()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.refreshErr = func() error { return errors.New("fake: connection refused") } })
	// A canary for the TTL's end tells a starved machine from a Done
	// closed late; a meter, a stall that left no time for retries.
	due, m := canary.New(start.Add(300*time.Millisecond)), canary.StartMeter()
	closedAt, ok := canary.AwaitBy(lease.Done(), due, 2*time.Second)
	worst := m.End()
	if !ok {
		t.Fatal("Done not closed while every renewal failed")
	}
	canary.CheckBy(t, due, closedAt, 0, "Done closed %v after the grant; the TTL was 300ms", closedAt.Sub(start))
	if lostAfter := closedAt.Sub(start); lostAfter < 250*time.Millisecond {
		t.Errorf("Done closed %v after the grant; too early for a 300ms TTL minus the drift margin", lostAfter)
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	if n := f.refreshes.Load(); n < 3 && !canary.Stalled(t, worst, 100*time.Millisecond, fmt.Sprintf("%d renewal attempts", n)) {
		t.Errorf("only %d renewal attempts before the deadline; failed renewals must be retried", n)
	}
}

// A renewal the backend refuses (not held) ends the lease at once.
func TestRenewalNotHeldLosesAtOnce(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: 3 * time.Second})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.del("k")
	select {
	case <-lease.Done():
	case <-time.After(1500 * time.Millisecond): // first renewal at 1s
		t.Fatal("Done not closed soon after a renewal found the grant gone")
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	if time.Until(lease.Deadline()) < time.Second {
		t.Errorf("lost with %v left before the deadline: it was not the deadline that ended it", time.Until(lease.Deadline()))
	}
}

// Leases granted together are renewed together through a batching driver.
//
// A stall of a renewal round (TTL/3) spreads the leases' renewals apart
// and counts for nothing: a meter tells it, and the check runs again.
func TestRenewalUsesBatches(t *testing.T) {
	for try := 1; ; try++ {
		m := canary.StartMeter()
		b, single := renewalBatches(t)
		worst := m.End()
		var bad []string
		if b == 0 || b > 12 {
			bad = append(bad, fmt.Sprintf("%d batch calls for 50 leases over ~3 renewal rounds; want a few", b))
		}
		if single > 6 {
			bad = append(bad, fmt.Sprintf("%d single refreshes beside the batches", single))
		}
		if len(bad) == 0 || try == 3 || !canary.Stalled(t, worst, 100*time.Millisecond, fmt.Sprint(bad)) {
			for _, e := range bad {
				t.Error(e)
			}
			return
		}
	}
}

// renewalBatches takes 50 leases of 300 ms through a batching driver and
// counts the batch and single refreshes over about three renewal rounds.
func renewalBatches(t *testing.T) (batches, singles int64) {
	f := newFake()
	l := lock.New(batchingFake{f}, &lock.Options{TTL: 300 * time.Millisecond})
	defer l.Close()
	for i := range 50 {
		if _, err := l.Lock(bg(t), "k"+string(rune('A'+i))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(350 * time.Millisecond) // about three renewal rounds
	return f.batches.Load(), f.refreshes.Load()
}

// Through a batching driver, renewals run in a few calls at a time however
// many leases are due: the Locker's goroutines do not grow with its leases.
func TestBatchRenewalConcurrencyIsBounded(t *testing.T) {
	var inFlight, peak atomic.Int64
	f := slowBatchingFake{fake: newFake(), delay: 50 * time.Millisecond, inFlight: &inFlight, peakIn: &peak}
	// A TTL long enough that making the leases under the race detector on
	// a loaded machine does not outlast it. The check is of concurrency,
	// not of timing: leases made slowly are due in fewer batches at once,
	// never in more.
	l := lock.New(f, &lock.Options{TTL: 9 * time.Second})
	defer l.Close()
	// 12 TTLs 10 ms apart: their renewals are due together (within
	// renewAhead of each other) but in 12 jobs that no worker may merge
	// (jobs of one TTL only), so that only the cap on workers keeps the
	// calls in flight at 4.
	var leases []*lock.Lease
	for i := range 1200 {
		ttl := 9*time.Second + time.Duration(i%12)*10*time.Millisecond
		lease, err := l.TryLock(bg(t), fmt.Sprintf("k%d", i), lock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	time.Sleep(3600 * time.Millisecond) // past the first renewal round (TTL/3)
	if p := peak.Load(); p == 0 || p > 4 {
		t.Errorf("%d RefreshBatch calls in flight at once for 12 due batches; want 1 to 4", p)
	}
	for _, lease := range leases {
		if lease.Err() != nil {
			t.Fatalf("lease lost: %v", lease.Err())
		}
	}
}

// Without auto-renewal, the lease ends at its local deadline.
func TestNoAutoRenew(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{DisableAutoRenew: true})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k", lock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(time.Second):
		t.Fatal("lease without renewal outlived its TTL")
	}
	if n := f.refreshes.Load(); n != 0 {
		t.Errorf("%d refreshes with auto-renewal off", n)
	}
	// WithAutoRenew(true) overrides the Locker's default.
	lease, _ = l.Lock(bg(t), "k2", lock.WithTTL(150*time.Millisecond), lock.WithDisableAutoRenew(false))
	time.Sleep(400 * time.Millisecond)
	if lease.Err() != nil {
		t.Errorf("WithAutoRenew(true) lease lost: %v", lease.Err())
	}
}

// A Lock waiting on a held key returns promptly when ctx ends, wrapping
// ErrNotAcquired and the context's error.
func TestLockCancel(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{Retry: lock.LinearBackoff(10 * time.Second)})
	defer l.Close()
	if _, err := l.Lock(bg(t), "k"); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Lock(c, "k")
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Lock returned %v after a 100ms deadline", d)
	}
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
}

// A grant applied by the backend whose reply was lost is removed by owner,
// in the background: nothing is left for its TTL to clear.
func TestLostReplyCleanedUp(t *testing.T) {
	f := newFake()
	l := lock.New(f, nil)
	defer l.Close()
	f.loseReply.Store(true)
	_, err := l.Lock(bg(t), "k")
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, errLostReply) {
		t.Fatalf("err = %v; want ErrNotAcquired wrapping the backend's error", err)
	}
	eventually(t, time.Second, "the grant with a lost reply is removed", func() bool {
		return f.holder("k") == "" && f.releases.Load() == 1
	})
	// The same with a cancelled context while the request is in flight.
	f.loseReply.Store(false)
	f.setFaults(func(x *faults) { x.acquireDelay = 50 * time.Millisecond })
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(c, "k2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want DeadlineExceeded", err)
	}
	eventually(t, time.Second, "a clean-up after a cancelled attempt", func() bool { return f.releases.Load() == 2 })
}

// eventually polls cond for up to d and fails the test if it never holds.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The holder's remaining time from a HeldError is honoured when it is
// sooner than the backoff.
func TestRetryAfterHint(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{Retry: lock.LinearBackoff(10 * time.Second), DisableAutoRenew: true})
	defer l.Close()
	if _, err := l.Lock(bg(t), "k", lock.WithTTL(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(bg(t))
	if d := time.Since(start); d > time.Second {
		t.Errorf("waited %v for a key whose holder had 100ms left", d)
	}
}

// With a Notifier, a waiter is woken by the release, not by its backoff.
func TestNotifierWakesWaiter(t *testing.T) {
	f := newFake()
	l := lock.New(notifyingFake{f}, &lock.Options{Retry: lock.LinearBackoff(10 * time.Second)})
	defer l.Close()
	held, err := l.Lock(bg(t), "k", lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		lease, err := l.Lock(bg(t), "k")
		if err == nil {
			lease.Unlock(bg(t))
		}
		got <- time.Now()
	}()
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	held.Unlock(bg(t))
	select {
	case at := <-got:
		if d := at.Sub(released); d > 500*time.Millisecond {
			t.Errorf("waiter woke %v after the release", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not woken by the release notification")
	}
	if f.subscribes.Load() != 1 {
		t.Errorf("%d subscriptions; want one for the waiting call", f.subscribes.Load())
	}
}

// A backend failure in Unlock is not reported as ErrNotHeld; the lease
// ends at once all the same, and the release is retried in the background
// until the backend is back, so that an outage does not cost a TTL.
func TestUnlockBackendFailure(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: time.Minute})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	fail.Store(true)
	f.setFaults(func(x *faults) {
		x.releaseErr = func() error {
			if fail.Load() {
				return errors.New("fake: timeout")
			}
			return nil
		}
	})
	err = lease.Unlock(bg(t))
	if err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock on a failing backend: err = %v; want the backend error, not ErrNotHeld", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("a failed Unlock left the lease reported held")
	}
	if !errors.Is(lease.Err(), lock.ErrNotHeld) {
		t.Errorf("Err() after Unlock = %v; want ErrNotHeld (released)", lease.Err())
	}
	if err := lease.Unlock(bg(t)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Unlock: %v; want ErrNotHeld", err)
	}
	time.Sleep(200 * time.Millisecond) // the outage
	if f.holder("k") == "" {
		t.Fatal("key freed while every release failed")
	}
	fail.Store(false)
	eventually(t, 2*time.Second, "the key is released once the backend is back", func() bool { return f.holder("k") == "" })
}

// Refresh by hand moves the deadline and the TTL later renewals use.
func TestManualRefresh(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{DisableAutoRenew: true})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k", lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Refresh(bg(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != time.Minute || time.Until(lease.Deadline()) < 50*time.Second {
		t.Errorf("after Refresh(1m): TTL %v, deadline in %v", lease.TTL(), time.Until(lease.Deadline()))
	}
	if err := lease.Refresh(bg(t), -time.Second); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Refresh(-1s): %v; want ErrInvalid", err)
	}
	// 0 is the Locker's default, as WithTTL(0) is
	if err := lease.Refresh(bg(t), 0); err != nil {
		t.Fatalf("Refresh(0): %v", err)
	}
	if lease.TTL() != lock.DefaultTTL || time.Until(lease.Deadline()) < lock.DefaultTTL-5*time.Second {
		t.Errorf("after Refresh(0): TTL %v, deadline in %v; want the default %v", lease.TTL(), time.Until(lease.Deadline()), lock.DefaultTTL)
	}
}

// Close releases held leases, fails waiting and later calls with
// ErrClosed, and leaves no goroutine.
func TestCloseFake(t *testing.T) {
	defer leakcheck.Verify(t, leakcheck.Take())
	f := newFake()
	l := lock.New(notifyingFake{f}, &lock.Options{TTL: time.Second})
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := l.Lock(bg(t), "k")
		waiting <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waiting; !errors.Is(err, lock.ErrClosed) {
		t.Errorf("waiting Lock: %v; want ErrClosed", err)
	}
	if f.holder("k") != "" {
		t.Error("Close did not release the held lease")
	}
	if !errors.Is(lease.Err(), lock.ErrClosed) {
		t.Errorf("lease Err() = %v; want ErrClosed", lease.Err())
	}
	if _, err := l.TryLock(bg(t), "k"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("TryLock after Close: %v", err)
	}
}

// Invalid Options surface on the first call, wrapped in ErrInvalid.
func TestInvalidOptions(t *testing.T) {
	l := lock.New(newFake(), &lock.Options{TTL: time.Nanosecond})
	defer l.Close()
	if _, err := l.TryLock(bg(t), "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("TryLock with Options.TTL 1ns: %v; want ErrInvalid", err)
	}
}

func TestDoReturnsLockError(t *testing.T) {
	f := newFake()
	l := lock.New(f, nil)
	defer l.Close()
	ran := false
	err := l.Do(bg(t), "", func(context.Context) error { ran = true; return nil })
	if ran || !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Do with an empty key: ran=%v err=%v", ran, err)
	}
}

// Do's fn finds its lease, and so its token, in its context; a context
// Do did not make carries none, and nested Do calls find their own.
func TestDoLeaseFrom(t *testing.T) {
	f := newFake()
	l := lock.New(f, nil)
	defer l.Close()
	if ls := lock.LeaseFrom(bg(t)); ls != nil || ls.Token() != 0 {
		t.Errorf("LeaseFrom(a plain context) = %v", ls)
	}
	//lint:ignore SA1012 a nil context is the input under test
	if lock.LeaseFrom(nil) != nil {
		t.Error("LeaseFrom(nil) is not nil")
	}
	err := l.Do(bg(t), "outer", func(ctx context.Context) error {
		outer := lock.LeaseFrom(ctx)
		if outer == nil || outer.Key() != "outer" || outer.Token() == 0 {
			return fmt.Errorf("LeaseFrom in Do = %v", outer)
		}
		return l.Do(ctx, "inner", func(ctx context.Context) error {
			if inner := lock.LeaseFrom(ctx); inner == nil || inner.Key() != "inner" || inner.Token() == outer.Token() {
				return fmt.Errorf("LeaseFrom in the nested Do = %v (outer %v)", inner, outer)
			}
			return nil
		})

	})

	if err != nil {
		t.Error(err)
	}
}

// Leases renewed in one job keep their own outcomes: a refresh that fails
// for one lease (validity 0) must not shorten the deadline of another whose
// refresh succeeded. "z" is granted last so its refresh runs last.
func TestRenewalFailureStaysWithItsLease(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: 300 * time.Millisecond})
	defer l.Close()
	a, err := l.Lock(bg(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	z, err := l.Lock(bg(t), "z")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.refreshFail = "z" })
	select {
	case <-z.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("z not lost while its renewals kept failing")
	}
	time.Sleep(200 * time.Millisecond) // past a's first deadline
	if err := a.Err(); err != nil {
		t.Fatalf("a lost although all its renewals succeeded: %v", err)
	}
}

// A renewal that finds the grant gone because Unlock released it does not
// report the lease lost: Unlock succeeded, so Err says released. The
// release's reply is slowed so that the renewal due at TTL/3 runs while
// the release is under way.
func TestUnlockStopsRenewal(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: 300 * time.Millisecond})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.releaseDelay = 150 * time.Millisecond })
	time.Sleep(50 * time.Millisecond) // Unlock's release spans the renewal at TTL/3
	if err := lease.Unlock(bg(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("Err() = %v after a successful Unlock, want released", lease.Err())
	}
}

// A Lock on a queueing driver waits in the queue by default, and follows a
// retry strategy given explicitly (per call or per Locker) with single
// attempts instead, so that NoRetry bounds it as on any driver.
func TestExplicitRetryIsNotQueued(t *testing.T) {
	f := newFake()
	var waits atomic.Int64
	q := lock.New(queuingFake{f, &waits}, nil)
	defer q.Close()
	ctx := context.Background()
	held, err := q.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}

	// Bounded, so that a broken Lock that queues fails instead of hanging.
	bounded, cancelB := context.WithTimeout(ctx, 2*time.Second)
	defer cancelB()
	before := waits.Load()
	if _, err := q.Lock(bounded, "k", lock.WithRetry(lock.NoRetry())); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
		t.Errorf("Lock with NoRetry on a held key: err = %v, want ErrNotAcquired and ErrHeld", err)
	}
	pinned := lock.New(queuingFake{f, &waits}, &lock.Options{Retry: lock.LimitRetry(lock.LinearBackoff(time.Millisecond), 2)})
	defer pinned.Close()
	if _, err := pinned.Lock(bounded, "k"); !errors.Is(err, lock.ErrHeld) {
		t.Errorf("Lock with Options.Retry limited to 2 retries: err = %v, want ErrHeld", err)
	}
	if n := waits.Load() - before; n != 0 {
		t.Errorf("Join called %d times for calls with a retry strategy; want 0", n)
	}

	c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := q.Lock(c, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock without a strategy: err = %v, want the deadline", err)
	}
	if n := waits.Load() - before; n != 1 {
		t.Errorf("Join called %d times for a Lock without a strategy; want 1", n)
	}
	_ = held.Unlock(ctx)
}

// TestZeroTTLIsTheDefault: a TTL of 0 means the default everywhere it is
// given: WithTTL(0) the Locker's (Options.TTL, else DefaultTTL), a URL's
// ttl=0 DefaultTTL. A negative TTL stays invalid.
func TestZeroTTLIsTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *lock.Options
		want time.Duration
	}{
		{"Options.TTL 7s", &lock.Options{TTL: 7 * time.Second}, 7 * time.Second},
		{"nil Options", nil, lock.DefaultTTL},
	} {
		l := lock.New(newFake(), tc.opts)
		lease, err := l.TryLock(bg(t), "k", lock.WithTTL(0))
		if err != nil {
			t.Errorf("%s: TryLock(WithTTL(0)): %v; want the Locker's default TTL", tc.name, err)
		} else if lease.TTL() != tc.want {
			t.Errorf("%s: TryLock(WithTTL(0)) gave TTL %v; want %v", tc.name, lease.TTL(), tc.want)
		}
		if _, err := l.TryLock(bg(t), "k2", lock.WithTTL(-time.Second)); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%s: TryLock(WithTTL(-1s)): %v; want ErrInvalid", tc.name, err)
		}
		l.Close()
	}
	l, err := lock.Open(bg(t), "faketest://?ttl=0")
	if err != nil {
		t.Fatalf("Open with ttl=0: %v; want DefaultTTL", err)
	}
	defer l.Close()
	lease, err := l.TryLock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != lock.DefaultTTL {
		t.Errorf("ttl=0 gave TTL %v; want DefaultTTL %v", lease.TTL(), lock.DefaultTTL)
	}
}
