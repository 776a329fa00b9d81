package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkTryLockUnlock measures one TryLock and its Unlock (two steps,
// each one round trip) on a key of its own, straight to the server.
func BenchmarkTryLockUnlock(b *testing.B) {
	l := newTestLocker(b, serverURL(b), &lock.Options{DisableAutoRenew: true}, &netCut{})
	ctx := context.Background()
	prefix := auditKey("bench-trylock")
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ls, err := l.TryLock(ctx, fmt.Sprintf("%s/%d", prefix, i%64))
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
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
