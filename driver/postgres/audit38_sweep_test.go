package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestAudit38SweepRacesGrants: sweeps that may delete any key not in
// use (keep 1 µs, so every row is a candidate the moment its grants
// end) run back to back while clients take and release a few keys, and
// while users' transactions check their leases with holds_grant. The
// sweep must never let a key be granted twice, make a key's token go
// back (its row and counter deleted, then used again), or change what
// an open holds_grant transaction was told.
func TestAudit38SweepRacesGrants(t *testing.T) {
	const schema = "audit38sweep"
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 120*time.Second)
	raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	o := &Options{Schema: schema}
	lockers := make([]*lock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLockerWith(t, url, o, &netCut{})
	}
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = auditKey(fmt.Sprintf("audit38-sweep%d", i))
	}

	var (
		mu      sync.Mutex
		holders = map[string]int{}
		last    = map[string]uint64{}
		grants  atomic.Int64
		swept   atomic.Int64
		checks  atomic.Int64
	)
	end := time.Now().Add(8 * time.Second)
	checkers := make([]*pgxpool.Pool, len(lockers)) // a user's own connection each
	for i := range checkers {
		checkers[i] = rawPool(t, url)
	}
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 38))
			for time.Now().Before(end) && ctx.Err() == nil {
				key := keys[r.IntN(len(keys))]
				ls, err := l.TryLock(ctx, key, lock.WithTTL(5*time.Second))
				if err != nil {
					continue
				}
				grants.Add(1)
				mu.Lock()
				holders[key]++
				if holders[key] > 1 {
					t.Errorf("two holders of %s (token %d)", key, ls.Token())
				}
				if ls.Token() <= last[key] {
					t.Errorf("token of %s went back: %d after %d", key, ls.Token(), last[key])
				}
				last[key] = ls.Token()
				mu.Unlock()
				if r.IntN(3) == 0 {
					checkTwice(t, checkers[i], schema, key, ls.Token(), &checks)
				}
				mu.Lock()
				holders[key]--
				mu.Unlock()
				if err := ls.Unlock(ctx); err != nil {
					t.Errorf("Unlock of %s: %v", key, err)
				}
			}
		}()
	}
	sweeper := rawPool(t, url)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(end) && ctx.Err() == nil {
			var n int64
			if err := sweeper.QueryRow(ctx, "SELECT "+schema+".sweep3(1000, 1)").Scan(&n); err != nil {
				if ctx.Err() == nil && !isUndefined(err) {
					t.Errorf("sweep: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			swept.Add(n)
		}
	}()
	wg.Wait()
	t.Logf("%d grants, %d rows swept, %d holds_grant transactions", grants.Load(), swept.Load(), checks.Load())
	if grants.Load() < 20 || swept.Load() == 0 || checks.Load() == 0 {
		t.Fatalf("the race did not happen: %d grants, %d rows swept, %d checks", grants.Load(), swept.Load(), checks.Load())
	}
}

// isUndefined: the schema is not there yet (the first step installs it).
func isUndefined(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && schemaMissing(pe.Code)
}

// checkTwice is a user's transaction that checks the lease (key, tok)
// with holds_grant, lets sweeps run, and checks again: both must say
// true, and the key's row stays.
func checkTwice(t *testing.T, raw *pgxpool.Pool, schema, key string, tok uint64, n *atomic.Int64) {
	ctx := context.Background()
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	defer tx.Rollback(ctx)
	for i := range 2 {
		var ok bool
		if err := tx.QueryRow(ctx, "SELECT "+schema+".holds_grant($1, $2)", key, int64(tok)).Scan(&ok); err != nil || !ok {
			t.Errorf("holds_grant(%s, %d) check %d of a live lease: %v, %v", key, tok, i+1, ok, err)
			return
		}
		time.Sleep(30 * time.Millisecond)
	}
	var rows int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+schema+".keys WHERE key = $1", key).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("the row of %s under a holds_grant transaction: %d, %v", key, rows, err)
	}
	n.Add(1)
}
