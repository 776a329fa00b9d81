package memcached

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// Round trips of an uncontended TryLock+Unlock: add and incr (grant), gets
// and cas (release).
const lockUnlockRoundTrips = 4

func benchClient(b *testing.B) *memcache.Client {
	c := memcache.New(testserver.SharedMemcached(b).Addr())
	c.MaxIdleConns = 16
	b.Cleanup(func() { c.Close() })
	if err := c.Ping(); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkVersion is one round trip: memcached's version command.
func BenchmarkVersion(b *testing.B) {
	c := benchClient(b)
	b.ResetTimer()
	for b.Loop() {
		if err := c.Ping(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlock is an uncontended TryLock and Unlock (auto-renewal
// on, as by default). Each iteration also times one version round trip on
// the connection the Locker's calls use, its lane's (memcached serves each
// connection on one of its worker threads, whose round trips may cost
// twice another's), so that the x-rtt metric, the Lock+Unlock time over
// that of its four round trips priced at a version round trip, compares
// figures taken under the same conditions.
func BenchmarkLockUnlock(b *testing.B) { benchLockUnlock(b, context.Background()) }

// BenchmarkLockUnlockCancellable is BenchmarkLockUnlock with a context
// that can be cancelled, as a caller's usually can: lock then needs the
// driver's calls to return at its end (the lanes, lanes.go), where with
// context.Background it makes them without.
func BenchmarkLockUnlockCancellable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchLockUnlock(b, ctx)
}

func benchLockUnlock(b *testing.B, ctx context.Context) {
	c := benchClient(b)
	d, lo := newDriverOptions(c, selectorOf(c), nil, false)
	l := lock.New(d, lo)
	defer l.Close()
	key := fmt.Sprintf("bench/lockunlock/%d", time.Now().UnixNano())
	var lockUnlock, version time.Duration
	for b.Loop() {
		t0 := time.Now()
		// The lane the cycle then takes: the idle lanes are a stack.
		vc, ln, err := d.lanes.take(context.Background())
		if err == nil {
			err = vc.Ping()
		}
		d.lanes.put(ln)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		lease, err := l.TryLock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		version += t1.Sub(t0)
		lockUnlock += t2.Sub(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(lockUnlock.Nanoseconds())/n, "lockunlock-ns")
	b.ReportMetric(float64(version.Nanoseconds())/n, "version-ns")
	b.ReportMetric(float64(lockUnlock)/float64(lockUnlockRoundTrips*version), "x-rtt")
}

// BenchmarkHandoff is the time from the holder's Unlock returning to a
// waiting Lock (from another Locker, default retry strategy) returning.
// The waiter has waited 20 ms, so its backoff is at its cap.
func BenchmarkHandoff(b *testing.B) {
	c := benchClient(b)
	holder, waiter := New(c, nil), New(c, nil)
	defer holder.Close()
	defer waiter.Close()
	ctx := context.Background()
	key := fmt.Sprintf("bench/handoff/%d", time.Now().UnixNano())
	var lat []time.Duration
	for b.Loop() {
		held, err := holder.TryLock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			lease, err := waiter.Lock(ctx, key)
			got <- time.Now()
			if err == nil {
				err = lease.Unlock(ctx)
			}
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := held.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		lat = append(lat, (<-got).Sub(released))
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
}
