package rediswatch

import (
	"context"
	"errors"
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
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// The benchmarks run against the test binary's shared local redis-server
// and three-master Cluster. Compare figures within one run:
//
//	go test -run '^$' -bench . -count 5 ./driver/rediswatch/
//
// LockUnlock and AcquireRelease time four PINGs in a row on the same
// client before every operation (the minimum: four round trips, two per
// transaction, WATCH with the reads, then MULTI/EXEC), and report the
// median operation as ns/op, its ratio to the median of those four PINGs
// as "ratio" (target: at most 1.2) and to one PING as "pings" (so at most
// 4.8). Timing the PINGs next to each operation makes load on the machine
// weigh on both alike. AcquireRelease is LockUnlock without package lock:
// the driver's transactions alone. Handoff (from the holder's Unlock
// returning to the waiter's Lock returning: the release message plus a
// two-round-trip grant; for a queued waiter, HandoffQueued, the message
// plus a one-round-trip claim) is reported against one PING before each.

func benchClient(b *testing.B, topology string) redis.UniversalClient {
	var r redis.UniversalClient
	if topology == "cluster" {
		r = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testserver.SharedRedisCluster(b).Addrs()})
	} else {
		r = redis.NewClient(&redis.Options{Addr: testserver.SharedRedis(b).Addr()})
	}
	b.Cleanup(func() { r.Close() })
	return r
}

type pinger interface {
	Ping(ctx context.Context) *redis.StatusCmd
}

// pingerFor is rdb, or on a Cluster the client of the master serving key.
func pingerFor(b *testing.B, rdb redis.UniversalClient, key string) pinger {
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb
	}
	node, err := c.MasterForKey(context.Background(), DefaultPrefix+"{"+key+"}")
	if err != nil {
		b.Fatal(err)
	}
	return node
}

// timed returns how long fn took.
func timed(b *testing.B, fn func() error) time.Duration {
	start := time.Now()
	if err := fn(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// pingsTimed returns how long n PINGs in a row took.
func pingsTimed(b *testing.B, p pinger, n int) time.Duration {
	ctx := context.Background()
	return timed(b, func() error {
		for range n {
			if err := p.Ping(ctx).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// report sets ns/op to the median op, "pings" to its ratio to one PING,
// and, for rtts > 1, "ratio" to its ratio to rtts PINGs in a row: pings
// holds the times of rtts PINGs in a row.
func report(b *testing.B, ops, pings []time.Duration, rtts int) {
	op, ping := median(ops), median(pings)
	b.ReportMetric(float64(op.Nanoseconds()), "ns/op")
	b.ReportMetric(float64(op)/float64(ping)*float64(rtts), "pings")
	if rtts > 1 {
		b.ReportMetric(float64(op)/float64(ping), "ratio")
	}
}

func topologies(b *testing.B, fn func(b *testing.B, topology string)) {
	for _, t := range []string{"standalone", "cluster"} {
		b.Run(t, func(b *testing.B) { fn(b, t) })
	}
}

// BenchmarkPing is one PING round trip, the unit of the other figures (on
// a Cluster, to one master).
func BenchmarkPing(b *testing.B) {
	topologies(b, func(b *testing.B, topology string) {
		p := pingerFor(b, benchClient(b, topology), "bench/ping")
		ctx := context.Background()
		for b.Loop() {
			if err := p.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLockUnlock is an uncontended Lock and Unlock: four round trips.
func BenchmarkLockUnlock(b *testing.B) {
	topologies(b, func(b *testing.B, topology string) {
		rdb := benchClient(b, topology)
		l := New(rdb, &Options{Options: lock.Options{DisableAutoRenew: true}})
		b.Cleanup(func() { l.Close() })
		ctx := context.Background()
		key := fmt.Sprintf("bench/lockunlock/%d", time.Now().UnixNano())
		p := pingerFor(b, rdb, key)
		ops, pings := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
		for b.Loop() {
			pings = append(pings, pingsTimed(b, p, 4))
			ops = append(ops, timed(b, func() error {
				lease, err := l.Lock(ctx, key)
				if err != nil {
					return err
				}
				return lease.Unlock(ctx)
			}))
		}
		report(b, ops, pings, 4)
	})
}

// BenchmarkAcquireRelease is the driver's grant and release transactions
// alone, without lock's bookkeeping around them (owner token, lease,
// renewal scheduler): the four round trips of the algorithm.
func BenchmarkAcquireRelease(b *testing.B) {
	topologies(b, func(b *testing.B, topology string) {
		rdb := benchClient(b, topology)
		d := testDriver(rdb, DefaultPrefix)
		b.Cleanup(func() { d.Close() })
		ctx := context.Background()
		key := fmt.Sprintf("bench/acquirerelease/%d", time.Now().UnixNano())
		p := pingerFor(b, rdb, key)
		ops, pings := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
		for b.Loop() {
			pings = append(pings, pingsTimed(b, p, 4))
			l := &driver.Lease{Key: key, Owner: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
			ops = append(ops, timed(b, func() error {
				if err := d.Acquire(ctx, l); err != nil {
					return err
				}
				return d.Release(ctx, l)
			}))
		}
		report(b, ops, pings, 4)
	})
}

// notifyingBackoff tells when Lock has found the key held and starts to
// wait, and then waits an hour: only the release message wakes it in time.
type notifyingBackoff chan struct{}

func (n notifyingBackoff) NewBackoff() lock.Backoff { return n }

func (n notifyingBackoff) Next() (time.Duration, bool) {
	select {
	case n <- struct{}{}:
	default:
	}
	return time.Hour, true
}

// BenchmarkHandoff times a release to a waiting client, on its own client:
// from the holder's Unlock returning to the waiter's Lock returning.
func BenchmarkHandoff(b *testing.B) {
	topologies(b, func(b *testing.B, topology string) {
		waiting := make(notifyingBackoff, 1)
		benchHandoff(b, topology, "handoff", []lock.Option{lock.WithRetry(waiting)}, func(redis.UniversalClient, string) {
			<-waiting // subscribed, and found the key held after that
		})
	})
}

// BenchmarkHandoffQueued is BenchmarkHandoff for a waiter in the queue (a
// Lock with the default retry strategy, which Handoff's does not use):
// from the holder's Unlock returning, which hands the key over, to the
// waiter's Lock returning.
func BenchmarkHandoffQueued(b *testing.B) {
	topologies(b, func(b *testing.B, topology string) {
		benchHandoff(b, topology, "handoff-queued", nil, func(rc redis.UniversalClient, key string) {
			wq := waitQueue(names.LockKey(key))
			for rc.LLen(context.Background(), wq).Val() == 0 {
				time.Sleep(100 * time.Microsecond)
			}
			time.Sleep(2 * time.Millisecond) // the waiter's reply is in
		})
	})
}

// benchHandoff times hand-offs to a waiter whose Lock takes opts, once
// waiting(rc, key) says it waits (rc: a client of neither).
func benchHandoff(b *testing.B, topology, name string, opts []lock.Option, waiting func(rc redis.UniversalClient, key string)) {
	ra, rb, rc := benchClient(b, topology), benchClient(b, topology), benchClient(b, topology)
	holder := New(ra, &Options{Options: lock.Options{DisableAutoRenew: true}})
	waiter := New(rb, &Options{Options: lock.Options{DisableAutoRenew: true}})
	b.Cleanup(func() { holder.Close(); waiter.Close() })
	ctx := context.Background()
	key := fmt.Sprintf("bench/%s/%d", name, time.Now().UnixNano())
	p := pingerFor(b, rb, key)
	type result struct {
		at  time.Time
		err error
	}
	ops, pings := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	for b.Loop() {
		pings = append(pings, pingsTimed(b, p, 1))
		held, err := holder.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		got, unlocked := make(chan result, 1), make(chan struct{})
		go func() {
			defer close(unlocked)
			l, err := waiter.Lock(ctx, key, opts...)
			got <- result{time.Now(), err}
			if err == nil {
				l.Unlock(ctx)
			}
		}()
		waiting(rc, key)
		if err := held.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		r := <-got
		if r.err != nil {
			b.Fatal(r.err)
		}
		ops = append(ops, r.at.Sub(released))
		<-unlocked
	}
	report(b, ops, pings, 1)
}

// BenchmarkHotKey is 32 contenders, each with its own client and Locker, on
// one key: each op is one grant (Lock and Unlock). It reports the client's
// CPU (cpu-ns/op) and the server's (server-cpu-ns/op, INFO cpu deltas) per
// grant, which decide throughput when client and server share the CPUs.
func BenchmarkHotKey(b *testing.B) {
	const n = 32
	admin := benchClient(b, "standalone")
	lockers := make([]*lock.Locker, n)
	for i := range lockers {
		lockers[i] = New(benchClient(b, "standalone"), nil)
		b.Cleanup(func() { lockers[i].Close() })
	}
	ctx := context.Background()
	key := fmt.Sprintf("bench/hotkey/%d", time.Now().UnixNano())
	var next atomic.Int64
	b.SetParallelism((n + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	cpu0, srv0 := cpuTime(), serverCPU(b, admin)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l := lockers[int(next.Add(1)-1)%n]
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
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64((serverCPU(b, admin)-srv0).Nanoseconds())/float64(b.N), "server-cpu-ns/op")
}

// cpuTime is this process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the Redis server's CPU time so far (INFO cpu: used_cpu_sys
// and used_cpu_user).
func serverCPU(b *testing.B, rdb redis.UniversalClient) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %q", name, v)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkRefreshBatch is the batched renewal of 100 exclusive leases on
// the shared standalone server (one watched transaction: two round trips),
// and of one share (its own transaction, unwatched: two round trips),
// reported as ns/op and against one PING timed before each call ("pings").
func BenchmarkRefreshBatch(b *testing.B) {
	for _, mode := range []driver.Mode{driver.Exclusive, driver.Shared} {
		b.Run(mode.String(), func(b *testing.B) {
			rdb := benchClient(b, "standalone")
			d := testDriver(rdb, DefaultPrefix)
			b.Cleanup(func() { d.Close() })
			ctx := context.Background()
			base := fmt.Sprintf("bench/refreshbatch/%d", time.Now().UnixNano())
			n := 100
			if mode == driver.Shared {
				n = 1
			}
			var ls []*driver.Lease
			for i := range n {
				l := &driver.Lease{Key: fmt.Sprintf("%s/%d", base, i), Owner: owner(), Mode: mode, TTL: time.Minute}
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
				pings = append(pings, pingsTimed(b, rdb, 1))
				ops = append(ops, timed(b, func() error {
					_, errs := d.RefreshBatch(ctx, ls, time.Minute)
					return errors.Join(errs...)
				}))
			}
			report(b, ops, pings, 1)
		})
	}
}
