package lock_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A Locker that cannot keep up with its leases says so before it loses
// one: with a real Redis behind a proxy whose replies come later and later
// (a slower network or server), the first late renewal is counted
// (dlock.renewals.late) and a warning logged before the first lease is
// lost, on both Redis drivers.
func TestAudit38LateRenewalsWarnBeforeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("ramps a proxy's delay for seconds")
	}
	for _, drv := range []struct {
		name string
		new  func(redis.UniversalClient, lock.Options) lock.Locker
	}{
		{"redisnx", func(c redis.UniversalClient, o lock.Options) lock.Locker {
			return redisnx.New(c, &redisnx.Options{Options: o})
		}},
		{"rediswatch", func(c redis.UniversalClient, o lock.Options) lock.Locker {
			return rediswatch.New(c, &rediswatch.Options{Options: o})
		}},
	} {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			proxy := startSlowProxy(t, testserver.SharedRedis(t).Addr())
			rdb := redis.NewClient(&redis.Options{Addr: proxy.addr(), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
			t.Cleanup(func() { rdb.Close() })
			ev := &events{}
			logger := slog.New(slog.NewTextHandler(ev, &slog.HandlerOptions{Level: slog.LevelWarn}))
			l := drv.new(rdb, lock.Options{TTL: 3 * time.Second, Logger: logger, MeterProvider: eventMeter{ev: ev}})
			t.Cleanup(func() { l.Close() })
			ctx := context.Background()
			base := fmt.Sprintf("late-test/%s/%d/", drv.name, time.Now().UnixNano())
			for i := range 20 {
				if _, err := l.TryLock(ctx, base+fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			// Replies come 100 ms later each 300 ms: a refresh (one or two
			// round trips) is late at some 0.25-0.5 s of delay and lost
			// past 1-2 s; stop once a lease is lost.
			for d := time.Duration(0); d < 4*time.Second && ev.first("dlock.leases.lost").IsZero(); d += 100 * time.Millisecond {
				proxy.delay.Store(int64(d))
				time.Sleep(300 * time.Millisecond)
			}
			late, warned, lost := ev.first("dlock.renewals.late"), ev.first("warn"), ev.first("dlock.leases.lost")
			switch {
			case lost.IsZero():
				t.Fatalf("no lease lost with replies 4 s late")
			case late.IsZero() || !late.Before(lost):
				t.Errorf("first late renewal counted at %v, first lease lost at %v: want the count first", clock(late), clock(lost))
			case warned.IsZero() || !warned.Before(lost):
				t.Errorf("warning logged at %v, first lease lost at %v: want the warning first\nlog:\n%s", clock(warned), clock(lost), ev.log())
			}
			if !strings.Contains(ev.log(), "dlock: renewals falling behind") {
				t.Errorf("no warning of renewals falling behind; log:\n%s", ev.log())
			}
			t.Logf("late at %v, warned at %v, lost at %v", clock(late), clock(warned), clock(lost))
		})
	}
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

// events records when each counter was first added to, and the log.
type events struct {
	mu    sync.Mutex
	at    map[string]time.Time
	lines strings.Builder
}

func (e *events) add(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at == nil {
		e.at = map[string]time.Time{}
	}
	if _, ok := e.at[name]; !ok {
		e.at[name] = time.Now()
	}
}

func (e *events) first(name string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at[name]
}

// Write records a log line (the Logger logs at Warn only) as "warn".
func (e *events) Write(p []byte) (int, error) {
	e.add("warn")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lines.Len() < 1<<16 {
		e.lines.Write(p)
	}
	return len(p), nil
}

func (e *events) log() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lines.String()
}

// eventMeter is a MeterProvider whose Int64Counters record their first
// Add in ev; its other instruments record nothing.
type eventMeter struct {
	noop.MeterProvider
	ev *events
}

func (p eventMeter) Meter(string, ...metric.MeterOption) metric.Meter {
	return eventCounters{ev: p.ev}
}

type eventCounters struct {
	noop.Meter
	ev *events
}

func (m eventCounters) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return eventCounter{name: name, ev: m.ev}, nil
}

type eventCounter struct {
	noop.Int64Counter
	name string
	ev   *events
}

func (c eventCounter) Add(context.Context, int64, ...metric.AddOption) { c.ev.add(c.name) }
func (c eventCounter) Enabled(context.Context) bool                    { return true }

// slowProxy forwards TCP connections to a server, delaying each chunk of
// the server's replies by delay (nanoseconds; changed while it runs)
// without reordering them.
type slowProxy struct {
	ln    net.Listener
	to    string
	delay atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

func startSlowProxy(t *testing.T, to string) *slowProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, to: to}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

func (p *slowProxy) serve(c net.Conn) {
	s, err := net.Dial("tcp", p.to)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	defer c.Close()
	defer s.Close()
	go io.Copy(s, c)
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			b := make([]byte, 64<<10)
			n, err := s.Read(b)
			if n > 0 {
				chunks <- chunk{b[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		time.Sleep(time.Until(ch.at.Add(time.Duration(p.delay.Load()))))
		if _, err := c.Write(ch.b); err != nil {
			return
		}
	}
}

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
