package zookeeper

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// Benchmarks against the shared local ZooKeeper server. Compare within one
// run (go test -run '^$' -bench . -count 5):
//
//	BenchmarkExists        one round trip
//	BenchmarkRoundTrips3   create + children + delete, the floor of a lock
//	BenchmarkLockUnlock    dlock Lock/TryLock + Unlock, target ≤ 1.2 × RoundTrips3
//	BenchmarkZkLock        go-zookeeper's zk.Lock Lock + Unlock, the peer
//	BenchmarkHandoff       release to the waiter's grant, in round trips
//	BenchmarkPaired        all of the above in one loop, for ratios that
//	                       load on the machine does not skew

func benchConn(b *testing.B) *zk.Conn {
	c, _ := rawConn(b, testserver.SharedZooKeeper(b).Addrs(), 10*time.Second, nil)
	return c
}

func benchLocker(b *testing.B) *lock.Locker {
	l, _ := benchLockerDriver(b)
	return l
}

// benchLockerDriver is benchLocker, also returning the driver.
func benchLockerDriver(b *testing.B) (*lock.Locker, *zkDriver) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, lo, err := dial(ctx, testserver.SharedZooKeeper(b).Addrs(), &Options{Root: testRoot, SessionTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	l := lock.New(d, lo)
	b.Cleanup(func() { l.Close() })
	return l, d
}

func benchKey(b *testing.B) string {
	return fmt.Sprintf("bench/%s/%d", b.Name(), time.Now().UnixNano())
}

// ensurePath creates path and its parents as persistent nodes.
func ensurePath(b *testing.B, c *zk.Conn, path string) {
	for i := 1; i <= len(path); i++ {
		if i == len(path) || path[i] == '/' {
			if _, err := c.Create(path[:i], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkExists(b *testing.B) {
	c := benchConn(b)
	for b.Loop() {
		if _, _, err := c.Exists("/"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRoundTrips3(b *testing.B) {
	c := benchConn(b)
	kp := keyPath(testRoot, benchKey(b))
	ensurePath(b, c, kp)
	acl := zk.WorldACL(zk.PermAll)
	for b.Loop() {
		p, err := c.Create(kp+"/_c_0123456789abcdef0123456789abcdef-lock-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Children(kp); err != nil {
			b.Fatal(err)
		}
		if err := c.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLockUnlock(b *testing.B) {
	for _, op := range []string{"Lock", "TryLock"} {
		b.Run(op, func(b *testing.B) {
			l, d := benchLockerDriver(b)
			k := benchKey(b)
			ctx := context.Background()
			take := l.Lock
			if op == "TryLock" {
				take = l.TryLock
			}
			before := d.relisted.Load()
			for b.Loop() {
				lease, err := take(ctx, k)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(d.relisted.Load()-before)/float64(b.N), "relists/op")
		})
	}
}

func BenchmarkZkLock(b *testing.B) {
	c := benchConn(b)
	kp := keyPath(testRoot, benchKey(b))
	ensurePath(b, c, kp)
	zl := zk.NewLock(c, kp, zk.WorldACL(zk.PermAll))
	for b.Loop() {
		if err := zl.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := zl.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff measures, per iteration, the time from the holder's
// Unlock call to the queued waiter's grant, and reports its median in
// nanoseconds and in round trips (the median of an exists round trip
// measured alongside).
func BenchmarkHandoff(b *testing.B) {
	a, w := benchLocker(b), benchLocker(b)
	c := benchConn(b)
	k := benchKey(b)
	kp := keyPath(testRoot, k)
	ctx := context.Background()
	var handoffs, rtts []time.Duration
	for b.Loop() {
		held, err := a.Lock(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		var lease *lock.Lease
		go func() {
			lease, err = w.Lock(ctx, k)
			got <- time.Now()
		}()
		for { // until the waiter is queued
			children, _, _ := c.Children(kp)
			if len(children) == 2 {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Millisecond) // and watching
		t0 := time.Now()
		_, _, _ = c.Exists("/")
		rtts = append(rtts, time.Since(t0))
		t0 = time.Now()
		if err := held.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		at := <-got
		if err != nil {
			b.Fatal(err)
		}
		handoffs = append(handoffs, at.Sub(t0))
		lease.Unlock(ctx)
	}
	slices.Sort(handoffs)
	slices.Sort(rtts)
	med, rtt := handoffs[len(handoffs)/2], rtts[len(rtts)/2]
	b.ReportMetric(float64(med.Nanoseconds()), "handoff-ns")
	b.ReportMetric(float64(med)/float64(rtt), "handoff-RTTs")
}

// BenchmarkPaired runs, in every iteration and in rotating order, three
// raw round trips (create, children, delete), a dlock Lock+Unlock, a dlock
// TryLock+Unlock and a zk.Lock Lock+Unlock, so that all four see the same
// machine load; it reports each one's median and the ratios of the
// medians.
func BenchmarkPaired(b *testing.B) {
	c := benchConn(b)
	l := benchLocker(b)
	ctx := context.Background()
	rawKey := keyPath(testRoot, benchKey(b)+"/raw")
	zkKey := keyPath(testRoot, benchKey(b)+"/zk")
	ensurePath(b, c, rawKey)
	ensurePath(b, c, zkKey)
	dk := benchKey(b) + "/dlock"
	zl := zk.NewLock(c, zkKey, zk.WorldACL(zk.PermAll))
	acl := zk.WorldACL(zk.PermAll)
	ops := []struct {
		name string
		run  func() error
	}{
		{"rt3", func() error {
			p, err := c.Create(rawKey+"/_c_0123456789abcdef0123456789abcdef-lock-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
			if err != nil {
				return err
			}
			if _, _, err := c.Children(rawKey); err != nil {
				return err
			}
			return c.Delete(p, -1)
		}},
		{"lock", func() error {
			lease, err := l.Lock(ctx, dk)
			if err != nil {
				return err
			}
			return lease.Unlock(ctx)
		}},
		{"trylock", func() error {
			lease, err := l.TryLock(ctx, dk)
			if err != nil {
				return err
			}
			return lease.Unlock(ctx)
		}},
		{"zklock", func() error {
			if err := zl.Lock(); err != nil {
				return err
			}
			return zl.Unlock()
		}},
	}
	times := make([][]time.Duration, len(ops))
	i := 0
	for b.Loop() {
		for j := range ops {
			k := (i + j) % len(ops)
			t0 := time.Now()
			if err := ops[k].run(); err != nil {
				b.Fatalf("%s: %v", ops[k].name, err)
			}
			times[k] = append(times[k], time.Since(t0))
		}
		i++
	}
	med := make([]float64, len(ops))
	for k, ts := range times {
		slices.Sort(ts)
		med[k] = float64(ts[len(ts)/2].Nanoseconds())
		b.ReportMetric(med[k], ops[k].name+"-ns")
	}
	b.ReportMetric(med[1]/med[0], "lock/rt3")
	b.ReportMetric(med[2]/med[0], "trylock/rt3")
	b.ReportMetric(med[1]/med[3], "lock/zklock")
	b.ReportMetric(med[2]/med[3], "trylock/zklock")
}
