package lock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// The test of dlock.renewals.late and its warning against a real Redis
// made slow is driver/rediswatch's TestAudit38LateRenewalsWarnBeforeLoss
// (lock's tests import no driver that registers a URL scheme).

// sizedBatchingFake's RefreshBatch takes delay, or until its context ends
// (then every lease fails with the context's error), records the largest
// call, and whether a call held key with others.
type sizedBatchingFake struct {
	*fake
	delay   time.Duration
	largest *atomic.Int64
	key     string
	shared  *atomic.Bool
}

func (f sizedBatchingFake) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	for {
		p := f.largest.Load()
		if int64(len(ls)) <= p || f.largest.CompareAndSwap(p, int64(len(ls))) {
			break
		}
	}
	for _, l := range ls {
		if l.Key == f.key && len(ls) > 1 {
			f.shared.Store(true)
		}
	}
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		errs := make([]error, len(ls))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return 0, errs
	}
	return batchingFake{f.fake}.RefreshBatch(ctx, ls, ttl)
}

// When renewals queue up behind slow RefreshBatch calls, a worker takes
// several queued batches in one call (which a Redis driver sends in one
// pipeline), so that the leases renewed per call grow with the backlog.
func TestAudit38QueuedBatchesMerge(t *testing.T) {
	var largest atomic.Int64
	f := sizedBatchingFake{fake: newFake(), delay: 300 * time.Millisecond, largest: &largest, shared: &atomic.Bool{}}
	l := lock.New(f, &lock.Options{TTL: 3 * time.Second})
	defer l.Close()
	for i := range 12000 { // 12 batches of 1000, due together, 4 workers
		if _, err := l.TryLock(bg(t), fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // past the first renewal round
	if n := largest.Load(); n <= 1000 || n > 4000 {
		t.Errorf("the largest RefreshBatch call renewed %d leases, with 12 batches of 1000 due at once; want 1001 to 4000", n)
	}
}

// A renewal call runs until the last deadline of its leases, not the
// first: a lease whose renewals keep failing (its deadline near) must not
// cut short the renewal of the leases due beside it, which then fail and
// are retried when already late (and are lost, with slow calls).
func TestAudit38BatchRunsToLastDeadline(t *testing.T) {
	var largest atomic.Int64
	shared := &atomic.Bool{}
	// The call outlasts the failing lease (3.4 s left when it starts), not
	// the others (4 s left).
	f := sizedBatchingFake{fake: newFake(), delay: 3700 * time.Millisecond, largest: &largest, key: "failing", shared: shared}
	f.setFaults(func(fs *faults) { fs.refreshFail = "failing" })
	var failed atomic.Int64
	l := lock.New(f, &lock.Options{TTL: 6 * time.Second, MeterProvider: countMeter{n: map[string]*atomic.Int64{"dlock.renewals.failed": &failed}}})
	defer l.Close()
	// The failing lease is renewed at 2 s, fails at once (alone, through
	// Refresh), and is retried 0.6 s later: with the others, taken 0.6 s
	// after it and due then, whose deadlines are 0.6 s later than its.
	failing, err := l.TryLock(bg(t), "failing")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	var others []*lock.Lease
	for i := range 50 {
		lease, err := l.TryLock(bg(t), fmt.Sprintf("other%d", i))
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, lease)
	}
	select {
	case <-failing.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the failing lease was not lost")
	}
	if !shared.Load() {
		t.Skip("the failing lease's retry did not fall in the others' batch (a starved machine)")
	}
	time.Sleep(500 * time.Millisecond)
	for i, lease := range others {
		if err := lease.Err(); err != nil {
			t.Fatalf("lease %d lost: %v (%d renewals failed)", i, err, failed.Load())
		}
	}
	if n := failed.Load(); n > 20 {
		t.Errorf("%d renewals failed: the others' call was cut short at the failing lease's deadline", n)
	}
}

// countMeter is a MeterProvider whose Int64Counters named in n add to it.
type countMeter struct {
	noop.MeterProvider
	n map[string]*atomic.Int64
}

func (p countMeter) Meter(string, ...metric.MeterOption) metric.Meter { return countCounters{n: p.n} }

type countCounters struct {
	noop.Meter
	n map[string]*atomic.Int64
}

func (m countCounters) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if c, ok := m.n[name]; ok {
		return countCounter{n: c}, nil
	}
	return noop.Int64Counter{}, nil
}

type countCounter struct {
	noop.Int64Counter
	n *atomic.Int64
}

func (c countCounter) Add(_ context.Context, n int64, _ ...metric.AddOption) { c.n.Add(n) }
func (c countCounter) Enabled(context.Context) bool                          { return true }

// blockingFake's Refresh and RefreshBatch wait until release is closed,
// whatever their context, counting the calls under way in in.
type blockingFake struct {
	*fake
	in      *atomic.Int64
	release chan struct{}
}

func (f blockingFake) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	f.in.Add(1)
	<-f.release
	return f.fake.Refresh(ctx, l, ttl)
}

func (f blockingFake) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	f.in.Add(1)
	<-f.release
	return batchingFake{f.fake}.RefreshBatch(ctx, ls, ttl)
}

// A renewal still queued for a worker when its lease has half its validity
// left is counted late (dlock.renewals.late), and so is one whose lease is
// lost before any worker takes it: the Locker fell behind, and the count
// must say so. Here the 4 workers of a batching driver are held by the
// renewals of 4 leases of other TTLs (jobs of different TTLs are not
// merged), so the last lease's renewal waits in the queue until the lease
// is lost. (Before, only a renewal a worker had taken was watched: that
// lease was lost uncounted.)
func TestQueuedRenewalCountedLate(t *testing.T) {
	f := blockingFake{fake: newFake(), in: &atomic.Int64{}, release: make(chan struct{})}
	var late atomic.Int64
	l := lock.New(f, &lock.Options{TTL: 3 * time.Second, MeterProvider: countMeter{n: map[string]*atomic.Int64{"dlock.renewals.late": &late}}})
	defer l.Close()
	defer close(f.release)
	for i := range 4 {
		if _, err := l.TryLock(bg(t), fmt.Sprintf("held%d", i), lock.WithTTL(time.Duration(1500+30*i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); f.in.Load() < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals under way, want 4", f.in.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	queued, err := l.TryLock(bg(t), "queued", lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-queued.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease whose renewal waits for a worker was not lost")
	}
	if n := f.in.Load(); n != 4 {
		t.Fatalf("%d renewals under way, want 4 (the queued one ran)", n)
	}
	// The 4 held renewals are late too (their leases are lost meanwhile).
	if n := late.Load(); n != 5 {
		t.Errorf("dlock.renewals.late = %d, want 5: the queued renewal of a lease lost before a worker took it is not counted", n)
	}
}
