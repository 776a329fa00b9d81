package lock_test

// Tests of the lease contract's edge cases that a safety review found
// broken: each fails on the code before its fix.

import (
	"context"
	"errors"
	"math"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/canary"
	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/lock"
)

func init() {
	// A queueing fake behind a URL, to check that OpenWith's retry
	// strategy is followed as Options.Retry is.
	lock.Register("fakequeue", func(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
		o, _, err := lock.URLOptions(u)
		if err != nil {
			return nil, nil, err
		}
		return queuingFake{newFake(), &openWaits}, o, nil
	})
}

var openWaits atomic.Int64

// heldAt reports whether the lease claims to be held at now.
func heldAt(l *lock.Lease, now time.Time) bool {
	select {
	case <-l.Done():
		return false
	default:
		return now.Before(l.Deadline())
	}
}

// Finding 1: Close whose release fails (the client is cut off) ends every
// lease all the same, within its bound; none is left reported held while
// its grant expires and another client takes the key.
func TestCloseWithFailedReleaseEndsLeases(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: time.Second, ReleaseTimeout: 300 * time.Millisecond})
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.releaseErr = func() error { return errors.New("fake: network unreachable") } })
	start := time.Now()
	_ = l.Close() // the release failed: an error is expected
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with ReleaseTimeout 300ms", d)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatalf("after Close, lease Done still open (Err %v, deadline in %v)", lease.Err(), time.Until(lease.Deadline()))
	}
	if !errors.Is(lease.Err(), lock.ErrClosed) {
		t.Errorf("Err() = %v; want ErrClosed", lease.Err())
	}
}

// Finding 2: a Refresh to a shorter TTL whose reply is lost after the
// backend applied it must not leave the lease claiming the old, longer
// deadline.
func TestRefreshShorterLostReply(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: 30 * time.Second, DisableAutoRenew: true})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.refreshLoseReply = true })
	if err := lease.Refresh(bg(t), 300*time.Millisecond); err == nil {
		t.Fatal("Refresh with a lost reply returned nil")
	}
	if exp := f.expires("k"); lease.Deadline().After(exp) {
		t.Fatalf("lease deadline %v after the backend's expiry (in %v)", time.Until(lease.Deadline()), time.Until(exp))
	}
	if !closedWithin(lease.Done(), time.Second) {
		t.Fatal("Done still open well after the 300ms the backend applied")
	}
	// Later refreshes count on no more than the lost one may give: the
	// backend could still apply it after them.
	lease2, err := l.Lock(bg(t), "k2")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.refreshLoseReply = true })
	_ = lease2.Refresh(bg(t), 200*time.Millisecond)
	f.setFaults(func(x *faults) { x.refreshLoseReply = false })
	if err := lease2.Refresh(bg(t), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(lease2.Deadline()); left > 200*time.Millisecond {
		t.Errorf("after a lost 200ms refresh, a 10s refresh claims %v", left)
	}
}

// Finding 2, concurrent form: a short refresh sent first but applied last
// must not be overtaken, in the lease's view, by a longer one sent after
// it. Refreshes of one lease are sent one after the other.
func TestConcurrentRefreshesKeepTheBackendsOrder(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{TTL: 30 * time.Second, DisableAutoRenew: true})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) {
		x.refreshApplyDelay = func(ttl time.Duration) time.Duration {
			if ttl < time.Second {
				return 100 * time.Millisecond // the short one is slow to arrive
			}
			return 0
		}
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = lease.Refresh(bg(t), 500*time.Millisecond)
	}()
	time.Sleep(20 * time.Millisecond)
	if err := lease.Refresh(bg(t), 30*time.Second); err != nil {
		t.Errorf("Refresh(30s): %v", err)
	}
	wg.Wait()
	if exp := f.expires("k"); heldAt(lease, time.Now()) && lease.Deadline().After(exp) {
		t.Fatalf("lease deadline in %v, after the backend's expiry in %v", time.Until(lease.Deadline()), time.Until(exp))
	}
}

// Finding 3: a Refresh whose reply arrives after the lease ended (here at
// its deadline, the reply being slow) returns an error wrapping ErrLost,
// not nil.
func TestRefreshOfLeaseEndedInFlight(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{DisableAutoRenew: true})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k", lock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	f.setFaults(func(x *faults) { x.refreshReplyDelay = 300 * time.Millisecond })
	err = lease.Refresh(bg(t), 200*time.Millisecond)
	if err == nil {
		t.Fatalf("Refresh returned nil for a lease that ended while it was under way (Err %v)", lease.Err())
	}
	if !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("err = %v; want ErrNotHeld and ErrLost", err)
	}
	if heldAt(lease, time.Now()) {
		t.Error("lease reported held after its deadline")
	}
}

// A Refresh that returns nil leaves the lease held, under random slow
// replies racing the deadline.
func TestRefreshNilMeansHeld(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{DisableAutoRenew: true})
	defer l.Close()
	for i := range 20 {
		lease, err := l.Lock(bg(t), "k", lock.WithTTL(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		d := time.Duration(i*7) * time.Millisecond
		f.setFaults(func(x *faults) { x.refreshReplyDelay = d })
		time.Sleep(50 * time.Millisecond)
		if err := lease.Refresh(bg(t), 100*time.Millisecond); err == nil && !heldAt(lease, time.Now()) {
			t.Fatalf("reply delay %v: Refresh returned nil, lease not held (Err %v)", d, lease.Err())
		}
		_ = lease.Unlock(bg(t))
		f.del("k")
	}
}

// Finding 5: renewals follow the validity the backend applies, not the
// TTL. With memcached's 3s minimum the validity is 1s: a renewal at TTL/3
// comes after the deadline.
func TestRenewalFollowsValidity(t *testing.T) {
	f := newFake()
	f.setFaults(func(x *faults) { x.validityLoss = 2 * time.Second })
	l := lock.New(f, &lock.Options{TTL: 3 * time.Second})
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(lease.Deadline()); left > time.Second {
		t.Fatalf("deadline in %v with a validity of 1s", left)
	}
	time.Sleep(2500 * time.Millisecond)
	if err := lease.Err(); err != nil {
		t.Fatalf("lease with auto-renewal lost: %v (%d refreshes)", err, f.refreshes.Load())
	}
	// A TTL whose validity leaves no room to renew in is refused.
	if _, err := l.Lock(bg(t), "k2", lock.WithTTL(2*time.Second+time.Millisecond)); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Lock with a TTL giving no validity: %v; want ErrInvalid", err)
	}
}

// Finding 6: one rule for queueing on every path: DefaultRetry (or
// nothing) queues; any other strategy makes single attempts, whether it
// comes from Options, OpenWith or WithRetry.
func TestRetryRuleIsUniform(t *testing.T) {
	f := newFake()
	var waits atomic.Int64
	q := lock.New(queuingFake{f, &waits}, nil)
	defer q.Close()
	held, err := q.TryLock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(bg(t))
	short := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	before := waits.Load()
	_, _ = q.Lock(short(), "k", lock.WithRetry(lock.DefaultRetry))
	if n := waits.Load() - before; n != 1 {
		t.Errorf("WithRetry(DefaultRetry) queued %d times; want 1, as with no option", n)
	}
	o, err := lock.OpenWith(bg(t), "fakequeue://", &lock.Options{Retry: lock.NoRetry()})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.TryLock(bg(t), "k"); err != nil {
		t.Fatal(err)
	}
	before = openWaits.Load()
	if _, err := o.Lock(short(), "k"); !errors.Is(err, lock.ErrHeld) {
		t.Errorf("OpenWith(Retry: NoRetry) Lock on a held key: %v; want ErrHeld at once", err)
	}
	if n := openWaits.Load() - before; n != 0 {
		t.Errorf("OpenWith's NoRetry was ignored: the call queued %d times", n)
	}
}

// Finding 7: no panic from ExponentialBackoff, whatever its bounds.
func TestExponentialBackoffHugeCap(t *testing.T) {
	for _, maxWait := range []time.Duration{math.MaxInt64, math.MaxInt64 / 3, 1 << 62} {
		b := lock.ExponentialBackoff(time.Millisecond, maxWait).NewBackoff()
		for i := range 200 {
			d, ok := b.Next()
			if !ok || d <= 0 {
				t.Fatalf("max %v, retry %d: Next() = %v, %v", maxWait, i, d, ok)
			}
		}
	}
}

// Finding 8: Do releases the lock when fn panics, and the panic goes on.
func TestDoReleasesOnPanic(t *testing.T) {
	f := newFake()
	l := lock.New(f, nil)
	defer l.Close()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want the panic of fn", r)
			}
		}()
		_ = l.Do(bg(t), "k", func(context.Context) error { panic("boom") })
	}()
	if h := f.holder("k"); h != "" {
		t.Fatal("the key is still held after fn panicked")
	}
}

// Finding 9: calls return by their context's deadline, whatever the
// clean-up that follows; Close returns within its bound.
func TestCallsKeepTheirDeadline(t *testing.T) {
	defer leakcheck.Verify(t, leakcheck.Take())
	f := newFake()
	l := lock.New(f, &lock.Options{ReleaseTimeout: 300 * time.Millisecond})
	f.setFaults(func(x *faults) { x.acquireDelay = time.Minute; x.releaseHang = true })
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// Canaries set for the context's end and for ReleaseTimeout's tell a
	// starved machine from a call that kept no deadline.
	start := time.Now()
	due := canary.New(start.Add(100 * time.Millisecond))
	if _, err := l.Lock(c, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock: %v", err)
	}
	canary.CheckBy(t, due, time.Now(), 50*time.Millisecond, "Lock with a 100ms context returned after %v", time.Since(start))
	start = time.Now()
	due = canary.New(start.Add(300 * time.Millisecond))
	_ = l.Close()
	canary.CheckBy(t, due, time.Now(), 200*time.Millisecond, "Close took %v with ReleaseTimeout 300ms", time.Since(start))
}

// Finding 12: a grant that races Close returns no lease, only ErrClosed,
// and is released.
func TestGrantRacingClose(t *testing.T) {
	f := newFake()
	l := lock.New(f, nil)
	f.setFaults(func(x *faults) { x.acquireSlow = 200 * time.Millisecond })
	type result struct {
		lease *lock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := l.Lock(context.Background(), "k")
		got <- result{lease, err}
	}()
	time.Sleep(50 * time.Millisecond)
	_ = l.Close()
	r := <-got
	if r.lease != nil || !errors.Is(r.err, lock.ErrClosed) {
		t.Errorf("Lock racing Close: lease %v, err %v; want nil and ErrClosed", r.lease, r.err)
	}
	if f.holder("k") != "" {
		t.Error("the grant racing Close was left on the backend")
	}
}

func closedWithin(c <-chan struct{}, d time.Duration) bool {
	select {
	case <-c:
		return true
	case <-time.After(d):
		return false
	}
}

// Error texts do not say the same thing twice.
func TestErrorTextsDoNotRepeat(t *testing.T) {
	l := lock.New(newFake(), nil)
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(bg(t)); err != nil {
		t.Fatal(err)
	}
	err = lease.Unlock(bg(t))
	if got, want := err.Error(), `lock: not held: unlock "k": lease released`; got != want {
		t.Errorf("second Unlock: %q; want %q", got, want)
	}
}

// Finding 9, for clients that do not stop a request in flight when its
// context is cancelled (go-redis honours only deadlines; gomemcache and
// go-zookeeper take no context): Lock, Refresh and Unlock return at the
// cancellation all the same, and a grant made meanwhile is released.
func TestCallsReturnAtCancel(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{ReleaseTimeout: time.Second})
	defer l.Close()
	const slow, cancelAt, slack = 400 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond
	cancelled := func() context.Context {
		c, cancel := context.WithCancel(context.Background())
		time.AfterFunc(cancelAt, cancel)
		return c
	}
	f.setFaults(func(x *faults) { x.acquireSlow = slow })
	start := time.Now()
	if _, err := l.Lock(cancelled(), "k"); !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("Lock: %v; want ErrNotAcquired and context.Canceled", err)
	}
	if d := time.Since(start); d > cancelAt+slack {
		t.Errorf("Lock cancelled at %v returned after %v (the attempt takes %v)", cancelAt, d, slow)
	}
	time.Sleep(slow + 100*time.Millisecond)
	if h := f.holder("k"); h != "" {
		t.Errorf("the grant made after Lock gave up was left on the backend (held by %s)", h)
	}

	f.setFaults(func(x *faults) { x.acquireSlow = 0 })
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.refreshApplyDelay = func(time.Duration) time.Duration { return slow } })
	start = time.Now()
	if err := lease.Refresh(cancelled(), time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Refresh: %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > cancelAt+slack {
		t.Errorf("Refresh cancelled at %v returned after %v", cancelAt, d)
	}
	if !heldAt(lease, time.Now()) {
		t.Errorf("a Refresh of unknown outcome ended the lease: %v", lease.Err())
	}

	f.setFaults(func(x *faults) { x.refreshApplyDelay = nil; x.releaseDelay = slow })
	start = time.Now()
	if err := lease.Unlock(cancelled()); !errors.Is(err, context.Canceled) {
		t.Errorf("Unlock: %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > cancelAt+slack {
		t.Errorf("Unlock cancelled at %v returned after %v", cancelAt, d)
	}
	select {
	case <-lease.Done():
	default:
		t.Error("Unlock returned with Done open")
	}
}

// A grant that arrives after the validity it counts on has passed (a
// hand-over that reached a queued waiter late: the driver counts its
// validity from the last check that found the key held) is refreshed
// before Lock returns it, never returned past its deadline.
func TestLateGrantIsRefreshedBeforeItIsReturned(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{DisableAutoRenew: true})
	defer l.Close()
	f.setFaults(func(x *faults) { x.acquireSlow = 300 * time.Millisecond })
	lease, err := l.Lock(bg(t), "k", lock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !heldAt(lease, time.Now()) {
		t.Fatalf("Lock returned a lease not held: deadline %v ago, Err %v", -time.Until(lease.Deadline()), lease.Err())
	}
	if exp := f.expires("k"); lease.Deadline().After(exp) {
		t.Errorf("deadline %v after the backend's expiry", lease.Deadline().Sub(exp))
	}
}

// Close keeps its bound even when the driver's own Close waits for the
// backend (go-zookeeper waits up to a second for a session's close): the
// driver's close goes on in the background.
func TestCloseBoundedBySlowDriverClose(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{ReleaseTimeout: 300 * time.Millisecond})
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	f.setFaults(func(x *faults) { x.closeSlow = 2 * time.Second })
	start := time.Now()
	due := canary.New(start.Add(300 * time.Millisecond))
	if err := l.Close(); err == nil {
		t.Error("Close returned nil while the driver's close was still under way")
	}
	canary.CheckBy(t, due, time.Now(), 150*time.Millisecond, "Close took %v with ReleaseTimeout 300ms", time.Since(start))
	if lease.Err() == nil {
		t.Error("a lease left open by Close")
	}
}

// Close keeps its bound when the client's releases ignore their context
// and time out later (gomemcache's own timeouts, against a partitioned
// server): a 10-minute memcached nemesis run caught Close taking 1.35s
// with ReleaseTimeout 1s.
func TestCloseBoundedByStuckReleases(t *testing.T) {
	f := newFake()
	l := lock.New(f, &lock.Options{ReleaseTimeout: 300 * time.Millisecond})
	for _, k := range []string{"a", "b", "c"} {
		if _, err := l.Lock(bg(t), k); err != nil {
			t.Fatal(err)
		}
	}
	f.setFaults(func(x *faults) { x.releaseStuck = time.Second })
	start := time.Now()
	due := canary.New(start.Add(300 * time.Millisecond)) // a starved machine, told from a Close late on its own
	_ = l.Close()
	canary.CheckBy(t, due, time.Now(), 150*time.Millisecond, "Close took %v with ReleaseTimeout 300ms and releases stuck for 1s", time.Since(start))
}
