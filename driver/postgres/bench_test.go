package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// BenchmarkCycleFloors times an uncontended cycle four ways, under a
// context that can end (as the bench's): lock, a Locker's Lock and
// Unlock as the bench makes them (New's defaults, auto-renewal on);
// statements, the plain steps that make that cycle (lock9, unlock9)
// alone on one connection of pgconn, prepared, no Locker, no pool;
// pair, the least a durable lock in a row needs (an UPDATE that takes
// the row's lock column, one that clears it); advisory, the bench's
// advisory loop (pg_try_advisory_lock, pg_advisory_unlock on a pgx.Conn).
// lock against statements is the Go client's share of the cycle,
// statements against pair dlock's SQL, pair against advisory a commit's.
// Run each in a process of its own, interleaved (-bench
// 'CycleFloors/lock$' and so on), with -benchtime 4000x or more.
func BenchmarkCycleFloors(b *testing.B) {
	url := serverURL(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const owner = "d00bb303036775c7f2c5d38be1301fc6"
	conn := func(b *testing.B) *pgconn.PgConn {
		pc, err := pgconn.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { pc.Close(context.Background()) })
		return pc
	}
	// pairLoop runs lock and unlock, each returning one row, b.N times on pc.
	pairLoop := func(b *testing.B, pc *pgconn.PgConn, lock, unlock string, oids []uint32, lv, uv [][]byte) {
		sl, err := pc.Prepare(ctx, "l", lock, oids)
		if err != nil {
			b.Fatal(err)
		}
		su, err := pc.Prepare(ctx, "u", unlock, oids[:len(uv)])
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			for _, s := range []struct {
				sd   *pgconn.StatementDescription
				vals [][]byte
			}{{sl, lv}, {su, uv}} {
				c, cancel := context.WithCancel(ctx)
				rows, err := readRows(pc.ExecStatement(c, s.sd, s.vals, nil, nil))
				cancel()
				if err != nil || len(rows) != 1 {
					b.Fatalf("%d rows, %v; want one", len(rows), err)
				}
			}
		}
	}
	b.Run("lock", func(b *testing.B) {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		l := New(pool, nil)
		b.Cleanup(func() { l.Close(); pool.Close() })
		key := auditKey("floors-lock")
		for b.Loop() {
			ls, err := l.Lock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("statements", func(b *testing.B) {
		l, _ := benchLocker(b)
		key := auditKey("floors-statements")
		ls, err := l.TryLock(ctx, key) // makes the key's row (and the schema)
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		lock, unlock := plainSteps(DefaultSchema)
		lv := [][]byte{[]byte(key), []byte(owner), []byte("30000000")}
		pairLoop(b, conn(b), lock.sql, unlock.sql, lock.oids, lv, lv[:2])
	})
	b.Run("pair", func(b *testing.B) {
		pc := conn(b)
		if _, err := pc.Exec(ctx, "CREATE TABLE IF NOT EXISTS dlock_floor_pair (key text PRIMARY KEY, h text) WITH (fillfactor = 50);"+
			" INSERT INTO dlock_floor_pair VALUES ('k', NULL) ON CONFLICT DO NOTHING").ReadAll(); err != nil {
			b.Fatal(err)
		}
		v := [][]byte{[]byte("k"), []byte(owner)}
		pairLoop(b, pc, "UPDATE dlock_floor_pair SET h = $2 WHERE key = $1 AND h IS NULL RETURNING true",
			"UPDATE dlock_floor_pair SET h = NULL WHERE key = $1 AND h = $2 RETURNING true", []uint32{oidText, oidText}, v, v)
	})
	b.Run("advisory", func(b *testing.B) {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close(context.Background()) })
		var ok bool
		for b.Loop() {
			// The bench's try is not cancellable (see bench/postgres.go).
			if err := c.QueryRow(context.WithoutCancel(ctx), "SELECT pg_try_advisory_lock($1)", int64(42)).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(42)).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
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
