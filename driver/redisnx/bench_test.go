package redisnx

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// The benchmarks run against the test binary's shared local redis-server.
// Compare them within one run, with medians over several counts:
//
//	go test -run '^$' -bench . -count 5 ./driver/redisnx/
//
// Targets: LockUnlock (TryLock then Unlock, uncontended) within 1.2x of two
// Pings; Handoff (from Unlock returning to the waiter's Lock returning)
// within 3 Pings. Handoff also reports ping-ns, a PING sent from the same
// idle state as the hand-off (a client that slept for a while), and
// LockUnlockVsPing measures both sides in one loop, so that load from
// other processes affects them alike.

func benchClient(b *testing.B) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis(b).Addr()})
	b.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return c
}

func benchKey(name string) string { return fmt.Sprintf("bench/%s/%d", name, time.Now().UnixNano()) }

func median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Nanoseconds())
}

// BenchmarkPing is one PING round trip, the unit of the other figures.
func BenchmarkPing(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlock is an uncontended Lock and Unlock with the defaults:
// two round trips. TryLock takes a context without deadline; Lock, as most
// callers do, one with a deadline. Besides ns/op it reports cpu-ns/op, the
// client's CPU time per cycle (getrusage: this process, the server runs in
// another), which the machine's load moves far less than wall time.
func BenchmarkLockUnlock(b *testing.B) {
	for _, c := range []struct {
		name string
		try  bool
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"TryLock", true, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"Lock", false, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Minute)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := New(benchClient(b), nil)
			b.Cleanup(func() { l.Close() })
			ctx, cancel := c.ctx()
			defer cancel()
			key := benchKey("lockunlock")
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				var lease *lock.Lease
				var err error
				if c.try {
					lease, err = l.TryLock(ctx, key)
				} else {
					lease, err = l.Lock(ctx, key)
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLockUnlockVsPing alternates two PINGs and a TryLock+Unlock on one
// connection each and reports the median of each (2ping-ns, lockunlock-ns)
// and their ratio.
func BenchmarkLockUnlockVsPing(b *testing.B) {
	c := benchClient(b)
	l := New(benchClient(b), nil)
	b.Cleanup(func() { l.Close() })
	ctx := context.Background()
	key := benchKey("vsping")
	var pings, locks []time.Duration
	for b.Loop() {
		t0 := time.Now()
		c.Ping(ctx)
		c.Ping(ctx)
		t1 := time.Now()
		lease, err := l.TryLock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		pings, locks = append(pings, t1.Sub(t0)), append(locks, time.Since(t1))
	}
	p, lu := median(pings), median(locks)
	b.ReportMetric(p, "2ping-ns")
	b.ReportMetric(lu, "lockunlock-ns")
	b.ReportMetric(lu/p, "ratio")
}

// BenchmarkHandoff times a release to a waiting client: from the holder's
// Unlock returning to the waiter's Lock returning. Its ns/op is the median
// hand-off of the run; ping-ns the median of a PING sent just before each
// Unlock, after the same idle wait. The waiter waits by a slow retry
// strategy, so that only the release message wakes it in time.
func BenchmarkHandoff(b *testing.B) {
	benchHandoff(b, "handoff", []lock.Option{lock.WithRetry(lock.LinearBackoff(time.Minute))}, func(*redis.Client, string) {
		time.Sleep(2 * time.Millisecond) // the waiter is waiting
	})
}

// BenchmarkHandoffQueued is BenchmarkHandoff for a waiter in the queue (a
// Lock with the default retry strategy, which Handoff's does not use):
// from the holder's Unlock returning, which hands the key over, to the
// waiter's Lock returning.
func BenchmarkHandoffQueued(b *testing.B) {
	benchHandoff(b, "handoff-queued", nil, func(c *redis.Client, key string) {
		q := lockKey(DefaultPrefix, key) + queueSuffix
		for c.ZCard(context.Background(), q).Val() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(2 * time.Millisecond) // the waiter's reply is in
	})
}

// benchHandoff times hand-offs to a waiter whose Lock takes opts, once
// waiting(c, key) says it waits.
func benchHandoff(b *testing.B, name string, opts []lock.Option, waiting func(c *redis.Client, key string)) {
	c := benchClient(b)
	holder, waiter := New(benchClient(b), nil), New(benchClient(b), nil)
	b.Cleanup(func() { holder.Close(); waiter.Close() })
	ctx := context.Background()
	key := benchKey(name)
	var lat, pings []time.Duration
	for b.Loop() {
		held, err := holder.TryLock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		got, unlocked := make(chan time.Time, 1), make(chan struct{})
		go func() {
			defer close(unlocked)
			l, err := waiter.Lock(ctx, key, opts...)
			got <- time.Now()
			if err != nil {
				b.Error(err)
				return
			}
			l.Unlock(ctx)
		}()
		waiting(c, key)
		t0 := time.Now()
		c.Ping(ctx)
		pings = append(pings, time.Since(t0))
		time.Sleep(2 * time.Millisecond) // the holder is idle, like the waiter
		if err := held.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		lat = append(lat, (<-got).Sub(released))
		<-unlocked
	}
	h, p := median(lat), median(pings)
	b.ReportMetric(h, "ns/op")
	b.ReportMetric(p, "ping-ns")
	b.ReportMetric(h/p, "pings")
}

// BenchmarkScriptCost prices the pieces of an uncontended Lock+Unlock on
// one connection, interleaved in each iteration so that load weighs on
// all alike, and reports each one's median: two PINGs (2ping-ns), two
// EVALSHA of "return 1" (2eval-ns: a script's fixed cost), a SET NX PX and
// a DEL (setnx-del-ns: the peers' commands without scripts), and
// acquire.lua then release.lua (scripts-ns: this driver's grant and
// release, without lock's bookkeeping), with the ratio of the last to two
// PINGs.
func BenchmarkScriptCost(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	trivial := redis.NewScript("return 1")
	k := benchKey("scriptcost")
	owner := redisx.NewInboxID()
	n := names(DefaultPrefix, k, owner)
	steps := []struct {
		metric string
		run    func() error
		d      []time.Duration
	}{
		{metric: "2ping-ns", run: func() error {
			c.Ping(ctx)
			return c.Ping(ctx).Err()
		}},
		{metric: "2eval-ns", run: func() error {
			trivial.Run(ctx, c, nil)
			return trivial.Run(ctx, c, nil).Err()
		}},
		{metric: "setnx-del-ns", run: func() error {
			c.SetNX(ctx, n[0]+"-plain", owner, time.Minute)
			return c.Del(ctx, n[0]+"-plain").Err()
		}},
		{metric: "scripts-ns", run: func() error {
			if err := acquireScript.Run(ctx, c, n[:1], owner, 60000, "x").Err(); err != nil {
				return err
			}
			return releaseScript.Run(ctx, c, n[:1], owner, 0, "x").Err()
		}},
	}
	for b.Loop() {
		for i := range steps {
			t0 := time.Now()
			if err := steps[i].run(); err != nil {
				b.Fatal(err)
			}
			steps[i].d = append(steps[i].d, time.Since(t0))
		}
	}
	for _, s := range steps {
		b.ReportMetric(median(s.d), s.metric)
	}
	b.ReportMetric(median(steps[3].d)/median(steps[0].d), "scripts/2ping")
}

// BenchmarkManyKeys is 32 contenders, each with its own client and Locker
// (a process of its own) and its own key, making Lock+Unlock cycles with a
// cancellable context (as callers pass): the many-keys scenario of make
// bench, for a CPU profile of the client. ns/op is per cycle of all of
// them together; cpu-ns/op the client's CPU per cycle.
func BenchmarkManyKeys(b *testing.B) {
	const n = 32
	lockers := make([]*lock.Locker, n)
	for i := range lockers {
		lockers[i] = New(benchClient(b), nil)
		b.Cleanup(func() { lockers[i].Close() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := benchKey("manykeys")
	var next atomic.Int64
	b.SetParallelism((n + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)-1) % n
		l, key := lockers[i], fmt.Sprintf("%s/%d", base, i)
		for pb.Next() {
			lease, err := l.Lock(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkScriptServerTime is the server's side of an uncontended grant
// and release: the time Redis spends running acquire.lua then release.lua
// (INFO commandstats, EVALSHA usec per cycle, which includes the commands
// they call), beside the same for scripts as small as a plain SET NX lock
// can have (SET NX PX; compare and delete: redislock's), alternated in
// blocks of 2000 cycles; medians of the blocks. Run it with -benchtime
// 20000x or more.
func BenchmarkScriptServerTime(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	k := benchKey("servertime")
	n := names(DefaultPrefix, k, "")
	plainSet := redis.NewScript(`if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end return 0`)
	plainDel := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	evalsha := func() (calls, usec int64) {
		info := c.Info(ctx, "commandstats").Val()
		_, rest, ok := strings.Cut(info, "cmdstat_evalsha:")
		if !ok {
			return 0, 0
		}
		rest, _, _ = strings.Cut(rest, "\r\n")
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				calls, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return calls, usec
	}
	const block = 2000
	var ours, plain []time.Duration
	cycle := 0
	for b.Loop() {
		cycle++
		if cycle%block != 0 {
			continue
		}
		for _, side := range []*[]time.Duration{&ours, &plain} {
			c0, u0 := evalsha()
			for i := range block {
				owner := fmt.Sprintf("%032x", i)
				var err error
				if side == &ours {
					keys := names(DefaultPrefix, k, owner)
					if err = acquireScript.Run(ctx, c, keys[:1], owner, 60000, "x").Err(); err == nil {
						err = releaseScript.Run(ctx, c, keys[:1], owner, 0, "x").Err()
					}
				} else {
					if err = plainSet.Run(ctx, c, []string{n[0] + "-plain"}, owner, 60000).Err(); err == nil {
						err = plainDel.Run(ctx, c, []string{n[0] + "-plain"}, owner).Err()
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			c1, u1 := evalsha()
			if c1-c0 < 2*block {
				b.Fatalf("commandstats counted %d EVALSHA for %d", c1-c0, 2*block)
			}
			*side = append(*side, time.Duration(u1-u0)*time.Microsecond/block)
		}
	}
	if len(ours) == 0 {
		b.Skip("too few cycles for a block: use -benchtime 20000x")
	}
	o, p := median(ours), median(plain)
	b.ReportMetric(o, "scripts-server-ns/cycle")
	b.ReportMetric(p, "setnx-server-ns/cycle")
	b.ReportMetric(o/p, "ratio")
}

// BenchmarkRefreshBatch is the batched renewal of 100 exclusive leases and
// 100 shares on the shared server: one RefreshBatch call, one round trip
// (one refresh.lua call), as lock's scheduler makes it. It reports ns/op
// and its ratio to one PING timed before each call ("pings").
func BenchmarkRefreshBatch(b *testing.B) {
	c := benchClient(b)
	d := testDriver(c)
	b.Cleanup(func() { d.Close() })
	ctx := context.Background()
	base := benchKey("refreshbatch")
	var ls []*driver.Lease
	for i := range 200 {
		l := &driver.Lease{Key: fmt.Sprintf("%s/%d", base, i), Owner: fmt.Sprintf("%032x", i+1), TTL: time.Minute}
		if i%2 == 1 {
			l.Mode = driver.Shared
		}
		if err := d.Acquire(ctx, l); err != nil {
			b.Fatal(err)
		}
		ls = append(ls, l)
	}
	b.Cleanup(func() {
		for _, l := range ls {
			d.Release(ctx, l)
		}
	})
	var ops, pings []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, errs := d.RefreshBatch(ctx, ls, time.Minute); errs[0] != nil || errs[len(errs)-1] != nil {
			b.Fatal(errs[0], errs[len(errs)-1])
		}
		ops, pings = append(ops, time.Since(t1)), append(pings, t1.Sub(t0))
	}
	b.ReportMetric(median(ops), "ns/op")
	b.ReportMetric(median(ops)/median(pings), "pings")
}

// BenchmarkHotKey is the bench's hot key in one process: 32 contenders,
// each with a client and a Locker of its own, take turns on one key until
// b.N grants were made; it reports grants/s (for a CPU profile of the
// client's work per grant: -cpuprofile). Its waits step inline (inline),
// or with the follow-up's goroutine (follow: list.go).
func BenchmarkHotKey(b *testing.B) {
	for _, inline := range []bool{true, false} {
		name := map[bool]string{true: "inline", false: "follow"}[inline]
		b.Run(name, func(b *testing.B) { benchHotKey(b, inline) })
	}
}

func benchHotKey(b *testing.B, inline bool) {
	const contenders = 32
	ctx := context.Background()
	key := benchKey("hot")
	lockers := make([]*lock.Locker, contenders)
	for i := range lockers {
		core, lo := redisx.NewCore("redisnx", benchClient(b), nil, false)
		d := newDriver(core)
		d.inline = inline
		lockers[i] = lock.New(d, lo)
	}
	b.Cleanup(func() {
		for _, l := range lockers {
			l.Close()
		}
	})
	var left atomic.Int64
	left.Store(int64(b.N))
	info := benchClient(b)
	cpu0 := serverCPU(b, info)
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	start := time.Now()
	done := make(chan error, contenders)
	for _, lk := range lockers {
		go func() {
			for left.Add(-1) >= 0 {
				l, err := lk.Lock(ctx, key)
				if err != nil {
					done <- err
					return
				}
				if err := l.Unlock(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range contenders {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "grants/s")
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "client-µs/grant")
	b.ReportMetric(float64((serverCPU(b, info)-cpu0).Microseconds())/float64(b.N), "server-µs/grant")
}

// serverCPU is the Redis server's CPU time so far (INFO cpu).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	var total float64
	for _, line := range strings.Split(c.Info(context.Background(), "cpu").Val(), "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += x
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
