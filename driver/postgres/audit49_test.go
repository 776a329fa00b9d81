package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// oneConnLocker is a Locker of schema (made for the test, dropped at
// cleanup) over a pool of one connection, so that every step goes on the
// connection whose statements the first steps prepared; and its driver
// and pool.
func oneConnLocker(t *testing.T, url, schema string) (*lock.Locker, *pgDriver, *pgxpool.Pool) {
	t.Helper()
	raw := rawPool(t, url)
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, lo := newDriver(pool, &Options{Schema: schema, Options: lock.Options{DisableAutoRenew: true}}, true)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	return l, d, pool
}

// rowToken is the token and holder of key's row in schema.
func rowToken(t *testing.T, raw *pgxpool.Pool, schema, key string) (string, *string) {
	t.Helper()
	var tok string
	var holder *string
	if err := raw.QueryRow(context.Background(), "SELECT token::text, holder FROM "+schema+".keys WHERE key = $1", key).Scan(&tok, &holder); err != nil {
		t.Fatal(err)
	}
	return tok, holder
}

// checkedCycle locks key with TryLock and unlocks it; a grant's token
// must be the one its row holds, and above last. It returns the token,
// or the error of the TryLock or Unlock.
// warmCycles runs two checked cycles of key (its row made, the plain
// steps prepared on l's connection) and returns the last token.
func warmCycles(t *testing.T, l *lock.Locker, raw *pgxpool.Pool, schema, key string) uint64 {
	t.Helper()
	var last uint64
	for range 2 {
		var err error
		if last, err = checkedCycle(t, l, raw, schema, key, last); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

func checkedCycle(t *testing.T, l *lock.Locker, raw *pgxpool.Pool, schema, key string, last uint64) (uint64, error) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	ls, err := l.TryLock(ctx, key)
	if err != nil {
		return 0, err
	}
	tok, holder := rowToken(t, raw, schema, key)
	if tok != strconv.FormatUint(ls.Token(), 10) || holder == nil {
		t.Errorf("granted token %d; the key's row holds %s (holder %v)", ls.Token(), tok, holder)
	}
	if ls.Token() <= last {
		t.Errorf("token %d after %d", ls.Token(), last)
	}
	if err := ls.Unlock(ctx); err != nil {
		return ls.Token(), err
	}
	if _, holder := rowToken(t, raw, schema, key); holder != nil {
		t.Errorf("after Unlock the row still names holder %s", *holder)
	}
	return ls.Token(), nil
}

// TestAudit49OperatorAltersKeys: the plain steps run as statements
// prepared once per connection, their row description kept from the
// Prepare (no Describe per run). An operator changing dlock's keys table
// under a running Locker (a column added, dropped, the token's type
// changed and changed back) makes each step either run with the server's
// new plan, granting a token its row holds, or fail with an error; once
// the table is back as it was, the Locker works again.
func TestAudit49OperatorAltersKeys(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	const s = "audit49_alter"
	l, d, _ := oneConnLocker(t, url, s)
	key := auditKey("audit49-alter")
	last := warmCycles(t, l, raw, s, key)
	for _, alter := range []string{
		"ALTER TABLE " + s + ".keys ADD COLUMN audit49 text DEFAULT 'x'",
		"ALTER TABLE " + s + ".keys DROP COLUMN audit49",
		"ALTER TABLE " + s + ".keys ALTER COLUMN token TYPE numeric",
		"ALTER TABLE " + s + ".keys ALTER COLUMN token TYPE bigint",
		"DROP FUNCTION " + s + ".lock3", // made again by the next call's install
		"DROP TABLE " + s + ".keys CASCADE",
	} {
		execAll(t, raw, alter)
		plain := d.plainRuns.Load()
		var errs []error
		for range 3 {
			tok, err := checkedCycle(t, l, raw, s, key, last)
			if tok > last {
				last = tok
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		t.Logf("%s: %d plain steps, errors %v", alter, d.plainRuns.Load()-plain, errs)
		if len(errs) > 1 {
			t.Errorf("after %s, %d of 3 cycles failed: %v", alter, len(errs), errs)
		}
	}
	if _, err := checkedCycle(t, l, raw, s, key, last); err != nil {
		t.Fatalf("with the table as it was: %v", err)
	}
}

// onConn runs sql on the one connection of pool (the Locker's), in the
// simple protocol.
func onConn(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if _, err := c.Conn().PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		t.Logf("%s: %v", sql, err) // pg_terminate_backend ends its own session
	}
}

// TestAudit49SessionReset: the connection under a Locker whose fast
// steps are prepared loses its statements (DEALLOCATE ALL, DISCARD ALL:
// a pooler's server_reset_query, a user's code on a pool given to New)
// or its backend (pg_terminate_backend). The statements' descriptions the
// connection keeps then describe nothing the server has: each step runs
// (wrapped, or on a new connection with its statements prepared again)
// with the token its row holds, or fails once with an error.
func TestAudit49SessionReset(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	for i, reset := range []string{
		"DEALLOCATE ALL",
		"DISCARD ALL",
		"SELECT pg_terminate_backend(pg_backend_pid())",
	} {
		s := "audit49_reset" + strconv.Itoa(i)
		l, d, pool := oneConnLocker(t, url, s)
		key := auditKey("audit49-reset")
		last := warmCycles(t, l, raw, s, key)
		onConn(t, pool, reset)
		var errs []error
		for range 3 {
			tok, err := checkedCycle(t, l, raw, s, key, last)
			if tok > last {
				last = tok
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 1 {
			t.Errorf("after %s: %v", reset, errs)
		}
		t.Logf("%s: wrapAll %v, errors %v", reset, d.wrapAll.Load(), errs)
	}
}

// TestAudit49HeldReplyLock: a Lock of a free key whose plain step ran
// (the grant made) but whose reply the network holds returns when its
// context ends; the grant is released in the background, and the next
// Lock of the Locker, on a new connection, gets its own token (above
// the lost grant's, the one its row holds), not the held reply's. The
// held reply, delivered late, reaches a connection the client closed.
func TestAudit49HeldReplyLock(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	px := newPGProxy(t, serverAddr(t, url))
	l := proxiedLocker(t, url, px, 1, &Options{Options: lock.Options{DisableAutoRenew: true}})
	key := auditKey("audit49-held-reply")
	warmCycles(t, l, raw, "dlock", key)
	var err error
	px.holdReplies()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	ls, err := l.Lock(cctx, key, lock.WithTTL(30*time.Second))
	cancel()
	if err == nil {
		t.Fatalf("granted through a held reply: token %d", ls.Token())
	}
	if took := time.Since(start); took > 2*time.Second || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Lock with its reply held: %v after %v", err, took)
	}
	lost, holder := rowToken(t, raw, "dlock", key)
	if holder == nil {
		t.Fatalf("the held Lock's step did not grant (row token %s): the test would prove nothing", lost)
	}
	waitFor(t, "the lost grant's release", 5*time.Second, func() bool {
		_, h := rowToken(t, raw, "dlock", key)
		return h == nil
	})
	lostTok, _ := strconv.ParseUint(lost, 10, 64)
	tok, err := checkedCycle(t, l, raw, "dlock", key, lostTok)
	if err != nil {
		t.Fatalf("the Lock after the held one: %v", err)
	}
	px.deliverReplies()
	if _, err := checkedCycle(t, l, raw, "dlock", key, tok); err != nil {
		t.Fatalf("after the held reply was delivered: %v", err)
	}
}

// TestAudit49ManyGoroutines: 16 goroutines on one Locker (a pool of 4)
// lock and unlock 3 keys for 2 s, a third of the calls under a context
// of 1 to 20 ms that ends mid-step. Run with -race: a step's argument
// and row buffers are its own. A grant is never beside another of its
// key, and each grant's token is above every earlier grant's of the key.
func TestAudit49ManyGoroutines(t *testing.T) {
	url := serverURL(t)
	l := newTestLocker(t, url, &lock.Options{DisableAutoRenew: true}, &netCut{})
	keys := []string{auditKey("audit49-many"), auditKey("audit49-many"), auditKey("audit49-many")}
	var mu [3]sync.Mutex // the last token of each key, read and set by its holder
	var lastTok [3]uint64
	var holders [3]atomic.Int32
	var grants, cancels atomic.Int64
	end := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				k := (g + i) % 3
				d := 5 * time.Second
				if i%3 == 0 {
					d = time.Duration(1+(g*7+i)%20) * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), d)
				ls, err := l.Lock(ctx, keys[k], lock.WithTTL(10*time.Second))
				if err != nil {
					cancel()
					if !errors.Is(err, lock.ErrNotAcquired) || ctx.Err() == nil {
						t.Errorf("Lock: %v", err)
						return
					}
					cancels.Add(1)
					continue
				}
				if n := holders[k].Add(1); n != 1 {
					t.Errorf("%d holders of key %d", n, k)
				}
				mu[k].Lock()
				if ls.Token() <= lastTok[k] {
					t.Errorf("key %d: token %d after %d", k, ls.Token(), lastTok[k])
				}
				lastTok[k] = ls.Token()
				mu[k].Unlock()
				grants.Add(1)
				holders[k].Add(-1)
				ls.Unlock(context.Background())
				cancel()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants, %d Locks ended by their context", grants.Load(), cancels.Load())
	other := newTestLocker(t, url, nil, &netCut{})
	for _, k := range keys {
		freeWithin(t, other, k, 5*time.Second)
	}
}

// TestAudit49HeldPlainLockLate: a Lock of a free key whose row exists
// (its plain step would grant) is held in the network until its context
// ends; its clean-up runs on a new connection, and then the held step
// reaches the server. It must grant nothing: the key stays free.
func TestAudit49HeldPlainLockLate(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	px := newPGProxy(t, serverAddr(t, url))
	l := proxiedLocker(t, url, px, 1, &Options{Options: lock.Options{DisableAutoRenew: true}})
	key := auditKey("audit49-held-late")
	last := warmCycles(t, l, raw, "dlock", key)
	var err error
	px.holdAll()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	ls, err := l.Lock(cctx, key, lock.WithTTL(30*time.Second))
	cancel()
	if err == nil {
		t.Fatalf("granted through a held request: token %d", ls.Token())
	}
	if px.heldBytes() == 0 {
		t.Fatal("nothing held: the test would prove nothing")
	}
	start := time.Now()
	waitFor(t, "the clean-up's tombstone", 8*time.Second, func() bool {
		var n int
		raw.QueryRow(ctx, "SELECT count(*) FROM dlock.voids WHERE key = $1", key).Scan(&n)
		return n > 0
	})
	t.Logf("the clean-up's tombstone after %v", time.Since(start))
	px.deliver()
	time.Sleep(300 * time.Millisecond)
	if tok, holder := rowToken(t, raw, "dlock", key); holder != nil {
		t.Fatalf("the held step, landing after its clean-up, granted the key to %s (token %s)", *holder, tok)
	}
	if _, err := checkedCycle(t, l, raw, "dlock", key, last); err != nil {
		t.Fatal(err)
	}
}

// TestAudit49PlainStepSearchPath: an application role whose search_path
// puts a schema another role controls before pg_catalog, where that
// role made exact-match operators (bigint * interval giving an hour ago,
// timestamptz > timestamptz always true, text = text always true) and a
// table named keys. The plain steps, prepared under that search_path,
// name every object with its schema: a second Locker's TryLock of a key
// the first holds (granted by the plain step) is refused.
func TestAudit49PlainStepSearchPath(t *testing.T) {
	u := serverURL(t)
	raw := rawPool(t, u)
	ctx := tctx(t, 30*time.Second)
	const schema, evilSchema = "audit49_sp", "audit49_evil"
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	auditRoles(t, u, "audit49_app", "audit49_evil")
	script, err := SchemaSQL(schema)
	if err != nil {
		t.Fatal(err)
	}
	execAll(t, raw, script,
		"GRANT USAGE ON SCHEMA "+schema+" TO audit49_app",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+schema+" TO audit49_app",
		"CREATE SCHEMA "+evilSchema+" AUTHORIZATION audit49_evil",
		"GRANT USAGE ON SCHEMA "+evilSchema+" TO audit49_app",
		"ALTER ROLE audit49_app SET search_path = "+evilSchema+", pg_catalog, public")
	evil := rawPool(t, asRole(t, u, "audit49_evil"))
	execAll(t, evil,
		"CREATE FUNCTION "+evilSchema+".mul(bigint, interval) RETURNS interval LANGUAGE sql IMMUTABLE AS $$ SELECT interval '-1 hour' $$",
		"CREATE OPERATOR "+evilSchema+".* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = "+evilSchema+".mul)",
		"CREATE FUNCTION "+evilSchema+".gt(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT false $$",
		"CREATE OPERATOR "+evilSchema+".> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = "+evilSchema+".gt)",
		"CREATE FUNCTION "+evilSchema+".eq(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT true $$",
		"CREATE OPERATOR "+evilSchema+".= (LEFTARG = text, RIGHTARG = text, FUNCTION = "+evilSchema+".eq)",
		"CREATE TABLE "+evilSchema+".keys (key text, token bigint)",
		"GRANT ALL ON "+evilSchema+".keys TO PUBLIC")
	app := asRole(t, u, "audit49_app")
	o := &Options{Schema: schema, NoCreate: true, Options: lock.Options{DisableAutoRenew: true}}
	a1, d1 := driverLocker(t, app, o)
	a2 := roleLocker(t, app, o)
	key := auditKey("audit49-sp")
	cycle(t, a1, key) // the key's row
	plain := d1.plainRuns.Load()
	l1, err := a1.Lock(ctx, key, lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Unlock(ctx)
	if d1.plainRuns.Load() == plain {
		t.Fatal("the Lock did not run the plain step: the test would prove nothing")
	}
	if tok, holder := rowToken(t, raw, schema, key); holder == nil || tok != strconv.FormatUint(l1.Token(), 10) {
		t.Fatalf("granted token %d; the row holds %s (holder %v)", l1.Token(), tok, holder)
	}
	l2, err := a2.TryLock(ctx, key)
	if err == nil {
		l2.Unlock(ctx)
		t.Fatalf("two holders of %s: tokens %d and %d", key, l1.Token(), l2.Token())
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v", err)
	}
}

// TestAudit49PgBouncer: through PgBouncer 1.18 in transaction mode
// without Options.TransactionPooling (a step's Bind may reach a server
// connection its Prepare never did, or one another client prepared on),
// and in session mode, two Lockers cycle one key; PgBouncer then
// restarts under them (their connections drop). Every grant's token is
// the one its row holds, above the last; at most one call of each
// Locker fails across the restart.
func TestAudit49PgBouncer(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	raw := rawPool(t, pg.URL())
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			b := testserver.StartPgBouncer(t, pg, mode)
			s := "audit49_pgb_" + mode
			t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s+" CASCADE") })
			o := &Options{Schema: s, Options: lock.Options{DisableAutoRenew: true}}
			l1, d1 := driverLocker(t, b.URL(), o)
			l2, d2 := driverLocker(t, b.URL(), o)
			key := auditKey("audit49-pgb")
			var last uint64
			run := func(n int) (errs []error) {
				for i := range n {
					l := l1
					if i%2 == 1 {
						l = l2
					}
					tok, err := checkedCycle(t, l, raw, s, key, last)
					if tok > last {
						last = tok
					}
					if err != nil {
						errs = append(errs, err)
					}
				}
				return errs
			}
			if errs := run(20); len(errs) > 0 {
				t.Fatal(errs)
			}
			if err := b.Restart(); err != nil {
				t.Fatal(err)
			}
			errs := run(20)
			if len(errs) > 2 {
				t.Errorf("after PgBouncer's restart: %v", errs)
			}
			t.Logf("errors %v; plain %d+%d, fast %d+%d, wrapAll %v %v", errs, d1.plainRuns.Load(), d2.plainRuns.Load(),
				d1.fastRuns.Load(), d2.fastRuns.Load(), d1.wrapAll.Load(), d2.wrapAll.Load())
		})
	}
}

// TestAudit49CancelledWhileRowLocked: a user's transaction holds the
// key's row FOR KEY SHARE (holds_grant's lock, a fencing check in the
// application's transaction) while a Lock's plain step waits for the
// row; the Lock's context ends mid-step. Once the transaction ends, the
// step (its backend still waiting) may grant the key to the owner that
// gave up; the Lock's clean-up must leave the key free well within its
// TTL, and nothing of the call attributed to the Locker's next one.
func TestAudit49CancelledWhileRowLocked(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	l, d := driverLocker(t, url, &Options{Options: lock.Options{DisableAutoRenew: true}})
	other := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("audit49-rowlocked")
	warmCycles(t, l, raw, "dlock", key)
	var err error
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM dlock.keys WHERE key = $1 FOR KEY SHARE", key); err != nil {
		t.Fatal(err)
	}
	plain := d.plainRuns.Load()
	cctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := make(chan error, 1)
	go func() {
		ls, err := l.Lock(cctx, key, lock.WithTTL(30*time.Second))
		if err == nil {
			ls.Unlock(ctx)
			err = errors.New("granted while the row was locked")
		}
		res <- err
	}()
	waitFor(t, "the plain step waiting for the row", 500*time.Millisecond, func() bool {
		var n int
		raw.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH r AS MATERIALIZED%'").Scan(&n)
		return n > 0
	})
	err = <-res
	if took := time.Since(start); took > 2*time.Second || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Lock returned %v after its start: %v", took, err)
	}
	var waiting int
	raw.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH r AS MATERIALIZED%'").Scan(&waiting)
	t.Logf("Lock: %v; plain steps still waiting on the server: %d", err, waiting)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	tok, holder := rowToken(t, raw, "dlock", key)
	h := "none"
	if holder != nil {
		h = *holder
	}
	t.Logf("after the transaction: row token %s, holder %s; %d plain steps", tok, h, d.plainRuns.Load()-plain)
	freeWithin(t, other, key, 5*time.Second)
	if _, err := checkedCycle(t, l, raw, "dlock", key, 0); err != nil {
		t.Fatal(err)
	}
}

// TestAudit49LongSchemaStatementNames: PostgreSQL keeps a prepared
// statement's name to its first 63 bytes. Under a schema of 50 bytes
// (the most Options.Schema takes) unlock3's and the plain unlock's names
// were one name: on a connection that had prepared one, the other's
// Prepare failed (42P05) and the Locker sent every step wrapped from then
// on; through a transaction pooler a Bind of one could reach the other.
// Each fast statement's name is distinct in its first 63 bytes, and a
// contended Unlock (unlock3, after the plain unlock found a waiter) on
// such a schema keeps the fast form.
func TestAudit49LongSchemaStatementNames(t *testing.T) {
	s := "audit49_" + strings.Repeat("s", 42)
	if !schemaName.MatchString(s) || len(s) != 50 {
		t.Fatalf("schema %q (%d bytes) is not the longest Options.Schema takes", s, len(s))
	}
	lk, ul, ck := fastSteps(s)
	seen := map[string]string{}
	for _, f := range []*fastStep{lk, ul, ck, lk.plain, ul.plain} {
		n := f.name[:min(len(f.name), 63)]
		if o, ok := seen[n]; ok {
			t.Errorf("%s and %s are one statement on the server, %s", o, f.name, n)
		}
		seen[n] = f.name
	}
	url := serverURL(t)
	l, d, _ := oneConnLocker(t, url, s)
	key := auditKey("audit49-long")
	cycle(t, l, key)
	cycle(t, l, key) // the plain lock and unlock prepared
	ctx := tctx(t, 10*time.Second)
	la, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	w := newLockerWith(t, url, &Options{Schema: s}, &netCut{})
	got := make(chan error, 1)
	go func() {
		lw, err := w.Lock(ctx, key)
		if err == nil {
			err = lw.Unlock(ctx)
		}
		got <- err
	}()
	raw := rawPool(t, url)
	waitFor(t, "the waiter's entry", 3*time.Second, func() bool { return len(entriesOf(t, raw, s, key)) > 1 })
	fast := d.fastRuns.Load()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d.fastRuns.Load() == fast || d.wrapAll.Load() {
		t.Errorf("the contended Unlock on schema %s: %d fast steps, every step wrapped from now on: %v", s, d.fastRuns.Load()-fast, d.wrapAll.Load())
	}
}
