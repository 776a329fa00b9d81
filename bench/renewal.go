package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Scenario 5: renewal at scale, on Redis. One Locker takes N leases with
// auto-renewal and TTL cfg.renewTTL (renewed every TTL/3, lock's period),
// holds them for three TTLs, and the bench counts:
//
//   - the commands the client sent (a go-redis hook: every command, those
//     in pipelines and MULTI/EXEC blocks included) and its round trips (one
//     per command or pipeline), per renewal period;
//   - on the server, INFO commandstats deltas over the hold: EVALSHA and
//     EVAL calls for redisnx, every command but INFO for rediswatch
//     (commands a script runs are counted by Redis too, so they are left
//     out for redisnx), per renewal period;
//   - the server's CPU time (INFO cpu, user and system) per period, and
//     the time the server's and the bench's threads waited, runnable, for a
//     CPU (/proc schedstat, when the server runs on this host): on a loaded
//     machine a server short of CPU shows a small CPU time and a long wait;
//   - lease refreshes per period (keys in refresh scripts, PEXPIREs), which
//     should be N;
//   - renewals late over the hold (dlock.renewals.late: renewals not done
//     with half their lease's validity left), which should be 0: the
//     Locker's warning that it cannot keep up;
//   - the goroutines the Locker added (the most seen during the hold,
//     sampled every 50 ms from 50 ms into it, when the goroutines that ran
//     the acquisitions' calls have ended; less those before the Locker
//     existed);
//   - client heap per lease: the live heap after a GC at the end of the
//     hold, less the live heap before the Locker existed (the client's
//     connections open, the bench's slice of leases allocated), divided by N;
//   - leases lost before the end (must be 0), and how many of them were
//     lost while the leases were still being taken (the renewals then
//     compete with 64 TryLock goroutines; "renewals late" counts the
//     hold, its note those while taking).
//
// The peers have no auto-renewal (the caller runs redsync's Mutex.Extend or
// redislock's Lock.Refresh itself, one command per lock), so their rows say
// so.

const scenRenewal = "5 renewal, %s leases"

func runRenewal(ctx context.Context, cfg *config, t *table) error {
	addr, ok := cfg.addr["redis"]
	if !ok {
		return nil
	}
	for _, n := range cfg.leases {
		scen := fmt.Sprintf(scenRenewal, leaseCount(n))
		for _, d := range []struct {
			name string
			new  func(*redis.Client, *lock.Options) *lock.Locker
		}{
			{"redisnx", func(c *redis.Client, o *lock.Options) *lock.Locker {
				return redisnx.New(c, &redisnx.Options{Options: *o})
			}},
			{"rediswatch", func(c *redis.Client, o *lock.Options) *lock.Locker {
				return rediswatch.New(c, &rediswatch.Options{Options: *o})
			}},
		} {
			if !cfg.wants(d.name) {
				continue
			}
			r, err := renewal(ctx, cfg, addr, d.name, d.new, n)
			if err != nil {
				return fmt.Errorf("%s %s: %w", scen, d.name, err)
			}
			r.scenario = scen
			t.add(r)
		}
		for _, p := range []string{"redsync", "redislock"} {
			if cfg.wants(p) {
				t.add(&row{scenario: scen, backend: "redis", lib: p, kind: peerRow, figs: []figure{
					{name: "auto-renewal", na: "n/a: none; the caller extends each lock itself, one command per lock"},
				}})
			}
		}
	}
	return nil
}

func leaseCount(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// cmdCounter is a go-redis hook counting what the client sends.
type cmdCounter struct {
	on         atomic.Bool
	cmds       atomic.Int64
	roundTrips atomic.Int64
	refreshes  atomic.Int64 // keys of EVALSHA/EVAL, and PEXPIREs
}

func (c *cmdCounter) count(cmds []redis.Cmder) {
	if !c.on.Load() {
		return
	}
	c.roundTrips.Add(1)
	c.cmds.Add(int64(len(cmds)))
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "evalsha", "eval":
			if a := cmd.Args(); len(a) > 2 {
				if n, err := strconv.Atoi(fmt.Sprint(a[2])); err == nil {
					c.refreshes.Add(int64(n))
				}
			}
		case "pexpire":
			c.refreshes.Add(1)
		}
	}
}

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds)
		return next(ctx, cmds)
	}
}

// commandStats returns the calls per command from INFO commandstats.
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				m[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return m, nil
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func renewal(ctx context.Context, cfg *config, addr, name string, newLocker func(*redis.Client, *lock.Options) *lock.Locker, n int) (*row, error) {
	admin, err := dialRedis(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	counter := &cmdCounter{}
	rdb.AddHook(counter)
	// Open the pool's connections now, so that their buffers are not
	// counted as the leases' heap.
	var pings errgroup
	for range 64 {
		pings.Go(func() error { return rdb.Ping(ctx).Err() })
	}
	if err := pings.Wait(); err != nil {
		return nil, err
	}

	leases := make([]*lock.Lease, n) // counted in heap0, not per lease
	heap0 := liveHeap()
	g0 := runtime.NumGoroutine()
	// Close releases every lease within ReleaseTimeout (5 s by default);
	// 100k releases take longer than that on a small machine.
	var (
		late, lateTaking atomic.Int64
		taking           atomic.Bool
	)
	locker := newLocker(rdb, &lock.Options{TTL: cfg.renewTTL, ReleaseTimeout: time.Minute, MeterProvider: lateMeter{n: &late, on: &counter.on, taking: &lateTaking, takingOn: &taking}})
	// The drivers run their commands on lanes, clients of their own made
	// from rdb's options, which rdb's hooks do not see: the counter is
	// added to them too.
	var lanes *redisx.Lanes
	if locker.As(&lanes) {
		lanes.AddHook(counter)
	}
	closed := false
	defer func() {
		if !closed {
			locker.Close()
		}
	}()

	// Take the leases, 64 at a time.
	taking.Store(true)
	t0 := time.Now()
	base := cfg.key("renewal", name, leaseCount(n))
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, 64)
	)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				l, err := locker.TryLock(ctx, base+"/"+strconv.Itoa(i))
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	acquire := time.Since(t0)
	taking.Store(false)
	lostAcq := 0
	for _, l := range leases {
		if l.Err() != nil {
			lostAcq++
		}
	}

	// Hold them for three TTLs, counting.
	stats0, err := commandStats(ctx, admin)
	if err != nil {
		return nil, err
	}
	usage0, cpuOK := redisUsage(ctx, admin)
	pid, waitOK := redisPID(ctx, admin)
	serverWait0, ok := runQueueWait(pid)
	waitOK = waitOK && ok
	clientWait0, clientOK := runQueueWait("self")
	counter.on.Store(true)
	hold := 3 * cfg.renewTTL
	holdStart := time.Now()
	gmax := 0
	for time.Since(holdStart) < hold {
		time.Sleep(50 * time.Millisecond)
		gmax = max(gmax, runtime.NumGoroutine())
	}
	counter.on.Store(false)
	held := time.Since(holdStart)
	stats1, err := commandStats(ctx, admin)
	if err != nil {
		return nil, err
	}
	usage1, ok := redisUsage(ctx, admin)
	cpuOK = cpuOK && ok
	serverWait1, ok := runQueueWait(pid)
	waitOK = waitOK && ok
	clientWait1, ok := runQueueWait("self")
	clientOK = clientOK && ok
	heap1 := liveHeap()
	lost := 0
	for _, l := range leases {
		if l.Err() != nil {
			lost++
		}
	}

	var server int64
	for cmd, calls := range stats1 {
		d := calls - stats0[cmd]
		switch {
		case name == "redisnx" && (cmd == "evalsha" || cmd == "eval"):
			server += d
		case name != "redisnx" && cmd != "info":
			server += d
		}
	}
	// INFO's own calls are left out above; the admin client sent nothing
	// else.

	t1 := time.Now()
	closed = true
	// Close gives up on the releases of leases that expire before it gets
	// to them (with a TTL of seconds and 100k leases, the last ones): it
	// reports them, and their keys are free anyway.
	unreleased := 0
	if err := locker.Close(); err != nil {
		var many interface{ Unwrap() []error }
		if !errors.As(err, &many) {
			return nil, fmt.Errorf("close: %w", err)
		}
		for _, e := range many.Unwrap() {
			if !errors.Is(e, context.DeadlineExceeded) {
				return nil, fmt.Errorf("close: %w", e)
			}
			unreleased++
		}
	}
	release := time.Since(t1)

	periods := held.Seconds() / (cfg.renewTTL / 3).Seconds()
	perPeriod := func(v int64) float64 { return float64(v) / periods }
	heapPer := (float64(heap1) - float64(heap0)) / float64(n)
	serverName := "server commands/period"
	if name == "redisnx" {
		serverName = "server EVALSHA/period"
	}
	return &row{backend: "redis", lib: name, kind: dlockRow, figs: []figure{
		{name: "lease refreshes/period", value: perPeriod(counter.refreshes.Load()), unit: count, note: fmt.Sprintf("%.1f periods of %v", periods, cfg.renewTTL/3)},
		{name: "client commands/period", value: perPeriod(counter.cmds.Load()), unit: count, dir: lowerBetter},
		{name: "client round trips/period", value: perPeriod(counter.roundTrips.Load()), unit: count, dir: lowerBetter},
		{name: serverName, value: perPeriod(server), unit: count, dir: lowerBetter},
		serverCPUFigure(cpuOK, float64(usage1.cpu-usage0.cpu)/periods),
		runQueueFigure("server run-queue wait/period", waitOK, float64(serverWait1-serverWait0)/periods),
		runQueueFigure("client run-queue wait/period", clientOK, float64(clientWait1-clientWait0)/periods),
		{name: "renewals late", value: float64(late.Load()), unit: count, dir: lowerBetter, note: fmt.Sprintf("dlock.renewals.late over the hold: renewals not done with half the validity left (%d more while taking)", lateTaking.Load())},
		{name: "goroutines added", value: float64(gmax - g0), unit: count, dir: lowerBetter},
		{name: "heap/lease", value: heapPer, unit: byteSize, dir: lowerBetter},
		{name: "leases lost", value: float64(lost), unit: count, dir: lowerBetter, note: fmt.Sprintf("%d of them while the leases were being taken (%.1fs)", lostAcq, acquire.Seconds())},
		{name: "acquire rate", value: float64(n) / acquire.Seconds(), unit: rate, note: "TryLock, 64 goroutines"},
		{name: "Close (releases all)", value: float64(release), unit: duration},
		{name: "Close: left to expire", value: float64(unreleased), unit: count, dir: lowerBetter, note: "leases that expired before Close released them"},
	}}, nil
}

// serverCPUFigure is the server's CPU time per renewal period (INFO cpu,
// user and system, over the hold), or why it is missing.
func serverCPUFigure(ok bool, perPeriod float64) figure {
	if !ok {
		return figure{name: "server CPU/period", na: "n/a: INFO cpu unreadable"}
	}
	return figure{name: "server CPU/period", value: perPeriod, unit: duration, dir: lowerBetter}
}

// runQueueFigure is the time a process's threads waited, runnable, for a
// CPU per renewal period (runQueueWait), or why it is missing: a server
// short of CPU on a loaded machine shows it here, not in its CPU time.
func runQueueFigure(name string, ok bool, perPeriod float64) figure {
	if !ok {
		return figure{name: name, na: "n/a: /proc schedstat unreadable (not on this host)"}
	}
	return figure{name: name, value: perPeriod, unit: duration, dir: lowerBetter, note: "runnable, waiting for a CPU (/proc schedstat; the machine's load)"}
}

// lateMeter is a MeterProvider whose dlock.renewals.late counter adds to n
// while on is set (the hold), and to taking while takingOn is set (while
// the leases are taken); its other instruments record nothing.
type lateMeter struct {
	noop.MeterProvider
	n, taking *atomic.Int64
	takingOn  *atomic.Bool
	on        *atomic.Bool
}

func (p lateMeter) Meter(string, ...metric.MeterOption) metric.Meter { return lateCounters{p: p} }

type lateCounters struct {
	noop.Meter
	p lateMeter
}

func (m lateCounters) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if name != "dlock.renewals.late" {
		return noop.Int64Counter{}, nil
	}
	return lateCounter{p: m.p}, nil
}

type lateCounter struct {
	noop.Int64Counter
	p lateMeter
}

func (c lateCounter) Add(_ context.Context, n int64, _ ...metric.AddOption) {
	if c.p.on.Load() {
		c.p.n.Add(n)
	}
	if c.p.takingOn.Load() {
		c.p.taking.Add(n)
	}
}
func (c lateCounter) Enabled(context.Context) bool { return true }
