package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkTryLockUnlock measures one TryLock and its Unlock (two steps,
// each one round trip) on a key of its own, straight to the server:
// fast, the plain UPDATEs as prepared statements (lock3 for a key's first
// Lock; the default); wrapped,
// every step in the wrapper's transaction (as after a refusal, or with
// Options.TransactionPooling). Run with -count to interleave them.
func BenchmarkTryLockUnlock(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		name := map[bool]string{false: "fast", true: "wrapped"}[wrapped]
		b.Run(name, func(b *testing.B) {
			l, d := benchLocker(b)
			d.wrapAll.Store(wrapped)
			ctx := context.Background()
			prefix := auditKey("bench-trylock")
			for i := 0; b.Loop(); i++ {
				ls, err := l.TryLock(ctx, fmt.Sprintf("%s/%d", prefix, i%64))
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if fast := d.fastRuns.Load() + d.plainRuns.Load(); (fast > 0) == wrapped {
				b.Fatalf("%d fast steps run", fast)
			}
		})
	}
}

// benchLocker is a Locker without auto-renewal on a pool of its own, and
// its driver.
func benchLocker(b *testing.B) (*lock.Locker, *pgDriver) {
	pool, err := pgxpool.New(context.Background(), serverURL(b))
	if err != nil {
		b.Fatal(err)
	}
	d, lo := newDriver(pool, &Options{Options: lock.Options{DisableAutoRenew: true}}, true)
	l := lock.New(d, lo)
	b.Cleanup(func() { l.Close() })
	return l, d
}

// BenchmarkSweep measures one sweep of sweepLimit keys used once (each
// taken and released, so its row is all that is left), with no age
// required of them.
func BenchmarkSweep(b *testing.B) {
	url := serverURL(b)
	l := newTestLocker(b, url, &lock.Options{DisableAutoRenew: true}, &netCut{})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	d, _ := newDriver(pool, nil, true)
	defer d.Close()
	ctx := context.Background()
	prefix := auditKey("bench-sweep")
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for j := range sweepLimit {
			ls, err := l.TryLock(ctx, fmt.Sprintf("%s/%d/%d", prefix, i, j))
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		rows, err := d.run(ctx, d.q.sweep, int64(sweepLimit), int64(0))
		if err != nil {
			b.Fatal(err)
		}
		if r, err := row1(rows, 1); err != nil || string(r[0]) != fmt.Sprint(sweepLimit) {
			b.Fatalf("sweep: %q, %v; want %d keys deleted", r, err, sweepLimit)
		}
	}
}

// BenchmarkHotKey measures grants per second of one key that 32 Lockers
// (each with its pool and listener) take and release in a loop, FIFO:
// fast and wrapped as in BenchmarkTryLockUnlock. Run with -count to
// interleave them; ns/op is the time per grant.
func BenchmarkHotKey(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		name := map[bool]string{false: "fast", true: "wrapped"}[wrapped]
		b.Run(name, func(b *testing.B) {
			const contenders = 32
			ls := make([]*lock.Locker, contenders)
			for i := range ls {
				l, d := benchLocker(b)
				d.wrapAll.Store(wrapped)
				ls[i] = l
			}
			ctx := context.Background()
			key := auditKey("bench-hot")
			grants := make(chan struct{}, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			for _, l := range ls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case grants <- struct{}{}:
						default:
							return
						}
						ls, err := l.Lock(ctx, key)
						if err != nil {
							b.Error(err)
							return
						}
						if err := ls.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
