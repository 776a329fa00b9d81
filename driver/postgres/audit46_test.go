package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// audit46Shared adds a granted shared entry of owner at key by hand, as
// an operator's or a replication tool's INSERT would (stmts run first, in
// the same transaction).
func audit46Shared(t *testing.T, raw *pgxpool.Pool, schema, key, owner string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".entries (key, owner, mode, lim, granted, token, expires, since, joined)"+
		" SELECT $1, $2, 1, 0, true, x.counter + 1, pg_catalog.clock_timestamp() + interval '1 minute', pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp()"+
		" FROM "+schema+".keys x WHERE x.key = $1", key, owner); err != nil {
		t.Fatalf("the shared entry: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// audit46Refused fails t unless an exclusive TryLock of key is refused
// (ErrHeld): a shared grant holds it.
func audit46Refused(t *testing.T, l *lock.Locker, key, what string) {
	t.Helper()
	ctx := tctx(t, 30*time.Second)
	ls, err := l.TryLock(ctx, key)
	if err == nil {
		ls.Unlock(ctx)
		t.Fatalf("%s: an exclusive TryLock was granted (token %d) beside a live shared grant: two holders", what, ls.Token())
	}
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("%s: TryLock: %v, want ErrHeld", what, err)
	}
}

// TestAudit46ReplicaRoleEntries: a session whose session_replication_role
// is replica (a replication or migration tool, a superuser's bulk fix
// that skips foreign keys) fires no ordinary trigger: a shared grant it
// copies into entries was not counted in keys.n, and the plain Lock took
// the key beside it. The triggers that keep n fire ALWAYS.
func TestAudit46ReplicaRoleEntries(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "audit46_replica"
	l, _ := driverLocker(t, url, &Options{Schema: schema})
	key := auditKey("a46-replica")
	cycle(t, l, key) // the key's row, n counted
	audit46Shared(t, raw, schema, key, strings.Repeat("r", 32), "SET LOCAL session_replication_role = replica")
	audit46Refused(t, l, key, "a shared grant copied under session_replication_role replica")
	counted(t, raw, schema, key)
	// A TRUNCATE there forgets the counts too.
	if _, err := raw.Exec(context.Background(), "BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE "+schema+".voids; COMMIT"); err != nil {
		t.Fatal(err)
	}
	var unknown bool
	if err := raw.QueryRow(context.Background(), "SELECT n IS NULL FROM "+schema+".keys WHERE key = $1", key).Scan(&unknown); err != nil || !unknown {
		t.Fatalf("n unknown after a TRUNCATE under replica: %v, %v", unknown, err)
	}
}

// TestAudit46MovedEntries: entries moved from one key to another by an
// operator's UPDATE of their key column, or a key's row renamed, never
// leave a key's n below its entries: the plain Lock of the key they moved
// to is refused.
func TestAudit46MovedEntries(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "audit46_moved"
	l, _ := driverLocker(t, url, &Options{Schema: schema})
	a, b := auditKey("a46-from"), auditKey("a46-to")
	cycle(t, l, a)
	cycle(t, l, b)
	audit46Shared(t, raw, schema, a, strings.Repeat("m", 32))
	if _, err := raw.Exec(ctx, "UPDATE "+schema+".entries SET key = $2 WHERE key = $1", a, b); err != nil {
		t.Fatal(err)
	}
	counted(t, raw, schema, a)
	counted(t, raw, schema, b)
	audit46Refused(t, l, b, "a shared grant moved to the key")
	cycle(t, l, a)

	// The key's row deleted beside its live entry (made again by the next
	// step, which counts), and another key's counted row renamed to it.
	c := auditKey("a46-renamed")
	cycle(t, l, c)
	if _, err := raw.Exec(ctx, "DELETE FROM "+schema+".keys WHERE key = $1", b); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, "UPDATE "+schema+".keys SET key = $2 WHERE key = $1", c, b); err != nil {
		t.Fatal(err)
	}
	audit46Refused(t, l, b, "another key's row renamed to the key")
	counted(t, raw, schema, b)
}

// TestAudit46DisabledTrigger: the table's owner disables count_entries
// (ALTER TABLE ... DISABLE TRIGGER, as for a bulk load): the steps' own
// entries are then not counted, and the plain Lock takes the key beside a
// shared grant. Open: nothing tells the steps that a trigger was
// disabled (an event trigger needs a superuser).
func TestAudit46DisabledTrigger(t *testing.T) {
	t.Skip("audit 46: count_entries disabled by the table's owner leaves keys.n below the truth (two holders), open; remedy after enabling it: UPDATE keys SET n = NULL")
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "audit46_disabled"
	l, _ := driverLocker(t, url, &Options{Schema: schema})
	key := auditKey("a46-disabled")
	cycle(t, l, key)
	execAll(t, raw, "ALTER TABLE "+schema+".entries DISABLE TRIGGER count_entries")
	t.Cleanup(func() {
		raw.Exec(context.Background(), "ALTER TABLE "+schema+".entries ENABLE ALWAYS TRIGGER count_entries")
	})
	var ok bool
	err := raw.QueryRow(context.Background(), "SELECT "+schema+".acquire3($1, $2, 1, 0, 30000000, false, false, 60000000, '') IS NOT NULL",
		key, strings.Repeat("d", 32)).Scan(&ok)
	if err != nil {
		// Refused while the trigger is off: nothing to count wrong.
		return
	}
	audit46Refused(t, l, key, "a shared grant made while count_entries was disabled")
}

// TestAudit46PlainSettings: under a database's defaults a DBA may choose,
// the plain Lock that waits for the key's row while a step adds a shared
// grant is refused once that step commits (filtered out and sent to the
// function, or timed out on the row and sent there, or run and judging
// the row as the step left it), and a cycle after it takes a higher
// token.
func TestAudit46PlainSettings(t *testing.T) {
	for i, set := range [][]string{
		{"default_transaction_isolation=serializable"},
		{"default_transaction_isolation=repeatable read"},
		{"lock_timeout=50ms"},
		{"statement_timeout=5s"},
		{"synchronous_commit=local"},
		{"default_transaction_read_only=on"},
		{"idle_in_transaction_session_timeout=100ms", "synchronous_commit=off"},
	} {
		t.Run(strings.Join(set, ","), func(t *testing.T) {
			db := "audit46_set" + string(rune('a'+i))
			url := envDB(t, db, set...)
			raw := rawPool(t, url)
			ctx := tctx(t, time.Minute)
			l, _ := driverLocker(t, url, nil)
			key := auditKey("a46-set")
			first, err := l.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			tx, err := raw.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SET LOCAL idle_in_transaction_session_timeout = 0"); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1 FROM dlock.keys WHERE key = $1 FOR UPDATE", key); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				ls, err := l.TryLock(ctx, key)
				if err == nil {
					err = errors.New("granted")
					ls.Unlock(ctx)
				}
				got <- err
			}()
			waitFor(t, "the TryLock waiting for the row", 20*time.Second, func() bool { return lockWaits(t, raw, db) == 1 })
			time.Sleep(300 * time.Millisecond) // a lock_timeout has run out, the function waits
			owner := strings.Repeat("s", 32)
			sharedGrant(t, tx, "dlock", key, owner)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; !errors.Is(err, lock.ErrHeld) {
				t.Fatalf("TryLock beside a shared grant made while it waited: %v, want ErrHeld", err)
			}
			counted(t, raw, "dlock", key)
			var ok bool
			rtx, err := raw.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite})
			if err != nil {
				t.Fatal(err)
			}
			if err := rtx.QueryRow(ctx, "SELECT dlock.release3($1, $2, false, 1000000, false)", key, owner).Scan(&ok); err != nil || !ok {
				t.Fatalf("release3 of the shared grant: %v, %v", ok, err)
			}
			if err := rtx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			second, err := l.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if second.Token() <= first.Token() {
				t.Errorf("token %d after %d", second.Token(), first.Token())
			}
			if err := second.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			counted(t, raw, "dlock", key)
		})
	}
}

// TestAudit46PgBouncerNamedStatements: through PgBouncer 1.18 in
// transaction mode without Options.TransactionPooling (a
// misconfiguration: named prepared statements are prepared on one server
// connection and run on another, settings leak between clients), the
// plain steps may fail or fall back, but never grant a held key, and
// tokens rise.
func TestAudit46PgBouncerNamedStatements(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	ctx := tctx(t, time.Minute)
	raw := rawPool(t, pg.URL())
	const s = "audit46_pgb"
	execAll(t, raw, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s+" CASCADE") })
	// The schema installed through a direct connection.
	setup, _ := driverLocker(t, pg.URL(), &Options{Schema: s})
	key := auditKey("a46-pgb")
	cycle(t, setup, key)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	polluter := rawPool(t, b.URL())
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, q := range []string{
				"SET lock_timeout = '1ms'",
				"SET synchronous_commit = off",
				"SET default_transaction_isolation = 'repeatable read'",
				"RESET ALL",
			} {
				polluter.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var (
		mu      sync.Mutex
		holding bool
		last    uint64
		grants  int
		errs    int
	)
	deadline := time.Now().Add(6 * time.Second)
	var lwg sync.WaitGroup
	for i := range 3 {
		l := newLockerWith(t, b.URL(), &Options{Schema: s}, &netCut{})
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			for time.Now().Before(deadline) {
				c, cancel := context.WithTimeout(ctx, 5*time.Second)
				le, err := l.TryLock(c, key, lock.WithTTL(10*time.Second))
				cancel()
				if err != nil {
					if !errors.Is(err, lock.ErrHeld) {
						mu.Lock()
						errs++
						mu.Unlock()
						time.Sleep(5 * time.Millisecond)
					}
					continue
				}
				mu.Lock()
				if holding {
					t.Errorf("Locker %d granted token %d while another holds the key", i, le.Token())
				}
				if le.Token() <= last {
					t.Errorf("Locker %d's token %d after %d", i, le.Token(), last)
				}
				holding, last = true, le.Token()
				grants++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding = false
				mu.Unlock()
				if err := le.Unlock(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
					mu.Lock()
					errs++
					mu.Unlock()
				}
			}
		}()
	}
	lwg.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d grants, %d errors through PgBouncer without TransactionPooling", grants, errs)
	if grants == 0 {
		t.Error("no grant: the test proves nothing")
	}
}
