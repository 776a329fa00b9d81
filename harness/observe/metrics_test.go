package observe_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// meter is an SDK MeterProvider whose measurements a ManualReader collects.
type meter struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeter(t *testing.T) *meter {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &meter{t: t, reader: r, mp: mp}
}

// collect returns the instruments measured so far, by name.
func (m *meter) collect() map[string]metricdata.Metrics {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatal(err)
	}
	ms := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/dlock-go/dlock/lock" {
			m.t.Errorf("instrumentation scope %q; want the lock package's path", sm.Scope.Name)
		}
		for _, x := range sm.Metrics {
			ms[x.Name] = x
		}
	}
	return ms
}

// attrs makes the attribute set of a measurement from "name=value" pairs
// (values true and false are booleans).
func attrs(kvs ...string) attribute.Set {
	var s []attribute.KeyValue
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		switch v {
		case "true", "false":
			s = append(s, attribute.Bool(k, v == "true"))
		default:
			s = append(s, attribute.String(k, v))
		}
	}
	return attribute.NewSet(s...)
}

// hist returns the data point of histogram name with exactly the
// attributes set, and whether there is one.
func hist(ms map[string]metricdata.Metrics, name string, set attribute.Set) (metricdata.HistogramDataPoint[float64], bool) {
	h, _ := ms[name].Data.(metricdata.Histogram[float64])
	for _, p := range h.DataPoints {
		if p.Attributes.Equals(&set) {
			return p, true
		}
	}
	return metricdata.HistogramDataPoint[float64]{}, false
}

// sum returns the value of counter name with exactly the attributes set
// (0 when it has no data point).
func sum(ms map[string]metricdata.Metrics, name string, set attribute.Set) int64 {
	s, _ := ms[name].Data.(metricdata.Sum[int64])
	for _, p := range s.DataPoints {
		if p.Attributes.Equals(&set) {
			return p.Value
		}
	}
	return 0
}

// points lists the attribute sets of every data point of name.
func points(ms map[string]metricdata.Metrics, name string) []string {
	var out []string
	add := func(s attribute.Set) { out = append(out, s.Encoded(attribute.DefaultEncoder())) }
	switch d := ms[name].Data.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			add(p.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			add(p.Attributes)
		}
	}
	slices.Sort(out)
	return out
}

// eventually collects until ok holds, for up to 2s.
func (m *meter) eventually(what string, ok func(map[string]metricdata.Metrics) bool) map[string]metricdata.Metrics {
	m.t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ms := m.collect()
		if ok(ms) {
			return ms
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: not measured within 2s; measured %v", what, ms)
		}
	}
}

// A lock, a wait (a second Locker waiting for the held key), a TryLock
// and a Lock that time out, a shared lease and a permit, and a lease lost
// behind its holder's back (Store.DeleteKey): each is measured once, with
// its driver, mode and outcome or cause, and no key.

func TestMetrics(t *testing.T) {
	m := newMeter(t)
	store := memory.NewStore()
	o := &lock.Options{TTL: 300 * time.Millisecond, MeterProvider: m.mp}
	holder := memory.New(store, o)
	defer holder.Close()
	waiter := memory.New(store, o)
	defer waiter.Close()
	ctx := bg(t)

	first, err := holder.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	held := attrs("dlock.driver=memory", "dlock.mode=exclusive")
	if n := sum(m.collect(), "dlock.leases.held", held); n != 1 {
		t.Errorf("dlock.leases.held while one lease is held: %d; want 1", n)
	}
	if _, err := waiter.TryLock(ctx, "k"); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock of a held key: %v; want ErrHeld", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = waiter.Lock(short, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held key with a 20ms deadline: %v; want DeadlineExceeded", err)
	}

	// The waiter queues, then the holder unlocks 100ms later.
	type result struct {
		l   *lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx, "k")
		got <- result{l, err}
	}()
	for len(store.Entries("k")) < 2 {
		time.Sleep(time.Millisecond)
	}
	const holdFor = 100 * time.Millisecond
	time.Sleep(holdFor)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}

	// A shared lease and a permit, on other keys.
	rl, err := holder.RLock(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	rl.Unlock(ctx)
	p, err := holder.Acquire(ctx, "p", 2)
	if err != nil {
		t.Fatal(err)
	}
	p.Unlock(ctx)

	// A lease whose Unlock finds the grant gone was lost too.
	gone, err := holder.Lock(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	store.DeleteKey("gone")
	if err := gone.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of a deleted grant: %v; want ErrNotHeld", err)
	}

	// The waiter's lease is lost: its next renewal finds the grant gone.
	store.DeleteKey("k")
	<-r.l.Done()
	if !errors.Is(r.l.Err(), lock.ErrLost) {
		t.Fatalf("after DeleteKey: %v; want ErrLost", r.l.Err())
	}
	lost := attrs("dlock.driver=memory", "dlock.mode=exclusive", "dlock.cause=not_held")
	ms := m.eventually("the lost lease", func(ms map[string]metricdata.Metrics) bool {
		return sum(ms, "dlock.leases.lost", lost) == 2
	})

	for name, unit := range map[string]string{
		"dlock.lock.wait.duration": "s",
		"dlock.lock.hold.duration": "s",
		"dlock.leases.held":        "{lease}",
		"dlock.leases.lost":        "{lease}",
	} {
		if ms[name].Unit != unit || ms[name].Description == "" {
			t.Errorf("%s: unit %q, description %q; want unit %q and a description", name, ms[name].Unit, ms[name].Description, unit)
		}
	}

	wait := func(mode, blocking, outcome string) attribute.Set {
		return attrs("dlock.driver=memory", "dlock.mode="+mode, "dlock.blocking="+blocking, "dlock.outcome="+outcome)
	}
	const waitName = "dlock.lock.wait.duration"
	if p, ok := hist(ms, waitName, wait("exclusive", "true", "granted")); !ok || p.Count != 3 {
		t.Errorf("granted Locks: %d measured; want 3 (the holder's two and the waiter's)", p.Count)
	} else if mx, _ := p.Max.Value(); mx < holdFor.Seconds() {
		t.Errorf("the longest granted wait is %.3fs; want the waiter's, at least %v", mx, holdFor)
	}
	if p, ok := hist(ms, waitName, wait("exclusive", "false", "not_acquired")); !ok || p.Count != 1 {
		t.Errorf("TryLocks of a held key: %d measured; want 1", p.Count)
	}
	// Its call began a little after its context's 20ms began: allow for it.
	if p, ok := hist(ms, waitName, wait("exclusive", "true", "canceled")); !ok || p.Count != 1 || p.Sum < 0.01 || p.Sum > 10 {
		t.Errorf("Locks that timed out after 20ms: %d measured, %.3fs in all; want 1, of 10ms or more, in seconds", p.Count, p.Sum)
	}
	for _, mode := range []string{"shared", "permit"} {
		if p, _ := hist(ms, waitName, wait(mode, "true", "granted")); p.Count != 1 {
			t.Errorf("granted %s leases: %d measured; want 1", mode, p.Count)
		}
	}
	if n := len(points(ms, waitName)); n != 5 {
		t.Errorf("wait data points: %v; want the 5 above", points(ms, waitName))
	}

	hold := func(mode, end string) attribute.Set {
		return attrs("dlock.driver=memory", "dlock.mode="+mode, "dlock.end="+end)
	}
	const holdName = "dlock.lock.hold.duration"
	if p, ok := hist(ms, holdName, hold("exclusive", "unlocked")); !ok || p.Count != 1 || p.Sum < holdFor.Seconds() {
		t.Errorf("unlocked exclusive leases: %d measured, %.3fs in all; want 1, held at least %v", p.Count, p.Sum, holdFor)
	}
	if p, ok := hist(ms, holdName, hold("exclusive", "lost")); !ok || p.Count != 2 {
		t.Errorf("lost leases' hold: %d measured; want 2", p.Count)
	}
	for _, mode := range []string{"shared", "permit"} {
		if p, _ := hist(ms, holdName, hold(mode, "unlocked")); p.Count != 1 {
			t.Errorf("unlocked %s leases: %d measured; want 1", mode, p.Count)
		}
	}

	for _, mode := range []string{"exclusive", "shared", "permit"} {
		if n := sum(ms, "dlock.leases.held", attrs("dlock.driver=memory", "dlock.mode="+mode)); n != 0 {
			t.Errorf("dlock.leases.held{%s} after every lease ended: %d; want 0", mode, n)
		}
	}
	if n := sum(ms, "dlock.leases.lost", lost); n != 2 {
		t.Errorf("lost leases: %d; want 2 (found by a renewal and by an Unlock)", n)
	}
	if got := points(ms, "dlock.leases.lost"); len(got) != 1 {
		t.Errorf("lost data points %v; want the one above", got)
	}
	for _, name := range []string{"dlock.renewals.failed", "dlock.releases.failed"} {
		if got := points(ms, name); len(got) != 0 {
			t.Errorf("%s: %v; want nothing (nothing failed)", name, got)
		}
	}
}

// With MetricKeys, every measurement carries the key as dlock.key.
func TestMetricKeys(t *testing.T) {
	m := newMeter(t)
	l := memory.New(memory.NewStore(), &lock.Options{MeterProvider: m.mp, MetricKeys: true})
	defer l.Close()
	lease, err := l.Lock(bg(t), "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	lease.Unlock(bg(t))
	ms := m.collect()
	if p, ok := hist(ms, "dlock.lock.wait.duration", attrs("dlock.driver=memory", "dlock.mode=exclusive", "dlock.blocking=true", "dlock.outcome=granted", "dlock.key=orders/42")); !ok || p.Count != 1 {
		t.Errorf("wait with the key: %v; want one point with dlock.key", points(ms, "dlock.lock.wait.duration"))
	}
	if p, ok := hist(ms, "dlock.lock.hold.duration", attrs("dlock.driver=memory", "dlock.mode=exclusive", "dlock.end=unlocked", "dlock.key=orders/42")); !ok || p.Count != 1 {
		t.Errorf("hold with the key: %v; want one point with dlock.key", points(ms, "dlock.lock.hold.duration"))
	}
	if n := sum(ms, "dlock.leases.held", attrs("dlock.driver=memory", "dlock.mode=exclusive", "dlock.key=orders/42")); n != 0 {
		t.Errorf("held with the key: %d; want 0", n)
	}
}

// Renewals that fail, and releases that fail (an Unlock's, then the
// background retries' that give up at the grant's expiry), are counted,
// and a lease whose renewals all fail is lost at its deadline (cause
// expired). A driver without a Name method is named after its package.
func TestMetricsFailures(t *testing.T) {
	ctx := bg(t)
	const drv = "dlock.driver=observe_test" // flaky's package
	newLocker := func() (*meter, *flaky, *lock.Locker) {
		m, f := newMeter(t), newFlaky()
		l := lock.New(f, &lock.Options{TTL: 300 * time.Millisecond, ReleaseTimeout: 50 * time.Millisecond, MeterProvider: m.mp})
		t.Cleanup(func() { l.Close() })
		return m, f, l
	}

	m, f, l := newLocker()
	lease, err := l.Lock(ctx, "renew")
	if err != nil {
		t.Fatal(err)
	}
	f.set(func(f *flaky) { f.refreshFail = "renew" })
	<-lease.Done()
	ms := m.eventually("the expired lease", func(ms map[string]metricdata.Metrics) bool {
		return sum(ms, "dlock.leases.lost", attrs(drv, "dlock.mode=exclusive", "dlock.cause=expired")) == 1
	})
	if n := sum(ms, "dlock.renewals.failed", attrs(drv, "dlock.mode=exclusive")); n < 2 {
		t.Errorf("failed renewals before the deadline: %d; want at least 2 (the first and a retry)", n)
	}
	if p, _ := hist(ms, "dlock.lock.hold.duration", attrs(drv, "dlock.mode=exclusive", "dlock.end=lost")); p.Count != 1 {
		t.Errorf("lost leases' hold: %d measured; want 1", p.Count)
	}

	m, f, l = newLocker()
	lease, err = l.Lock(ctx, "release")
	if err != nil {
		t.Fatal(err)
	}
	f.set(func(f *flaky) { f.releaseFail = true })
	if err := lease.Unlock(ctx); err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock with a failing release: %v; want the backend's error", err)
	}
	ms = m.collect()
	if n := sum(ms, "dlock.releases.failed", attrs(drv, "dlock.mode=exclusive", "dlock.background=false")); n != 1 {
		t.Errorf("failed Unlocks: %d; want 1", n)
	}
	if p, _ := hist(ms, "dlock.lock.hold.duration", attrs(drv, "dlock.mode=exclusive", "dlock.end=unlocked")); p.Count != 1 {
		t.Errorf("the failed Unlock ends the lease all the same: %d unlocked measured; want 1", p.Count)
	}
	m.eventually("the background release giving up", func(ms map[string]metricdata.Metrics) bool {
		return sum(ms, "dlock.releases.failed", attrs(drv, "dlock.mode=exclusive", "dlock.background=true")) == 1
	})
}

// Debug logs cost nothing when the Logger's level is above Debug, and a
// no-op MeterProvider nothing beside no MeterProvider: a Lock+Unlock cycle
// allocates as much as without either.

func bg(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
