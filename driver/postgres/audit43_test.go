package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Audit 43: the one-transaction set (AcquireSet) under a DBA's settings
// and a pooler, behind a row another transaction holds, delivered late
// after its clean-up, and in contention with other sets (in any order)
// and single-key steps.

// holdRows begins a transaction of the test's that holds the rows of
// keys FOR SHARE (as a user's transaction that checked the leases
// would): every step on them waits. The rows must exist.
func holdRows(t *testing.T, ctx context.Context, url string, keys ...string) pgx.Tx {
	t.Helper()
	tx, err := rawPool(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; SET LOCAL idle_in_transaction_session_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM dlock.keys WHERE key = ANY ($1) FOR SHARE) s", keys).Scan(&n); err != nil || n != len(keys) {
		t.Fatalf("holding the rows of %q: %d rows, %v", keys, n, err)
	}
	return tx
}

// TestAudit43PGSetBehindBusyRow: a set whose first key's row is held by
// another transaction waits for it, under the database's defaults, a
// DBA's settings or PgBouncer's transaction pooling; once the row is
// free it is granted in one step (no statement_timeout, lock_timeout or
// idle timeout fails it between its keys, and no default isolation
// lets it see an older snapshot). The same set cancelled while it waits
// returns by its context's end, and once the row is free (its step then
// runs on the server, its client gone) leaves none of its keys held.
func TestAudit43PGSetBehindBusyRow(t *testing.T) {
	for _, tc := range []struct{ name, db, setting string }{
		{"Default", "", ""},
		{"Serializable", "audit43_serializable", "default_transaction_isolation=serializable"},
		{"RepeatableRead", "audit43_rr", "default_transaction_isolation=repeatable read"},
		{"StatementTimeout", "audit43_stmt", "statement_timeout=50ms"},
		{"LockTimeout", "audit43_lock", "lock_timeout=20ms"},
		{"IdleInTransaction", "audit43_idle", "idle_in_transaction_session_timeout=100ms"},
		{"PlpgsqlExtraErrors", "audit43_extra", "plpgsql.extra_errors=all"},
		{"PgBouncer", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := serverURL(t)
			if tc.db != "" {
				url = envDB(t, tc.db, tc.setting)
			}
			lurl, opts := url, &Options{}
			if tc.name == "PgBouncer" {
				lurl, opts = testserver.StartPgBouncer(t, testserver.SharedPostgres(t), "transaction").URL(), &Options{TransactionPooling: true}
			}
			a := newLockerWith(t, lurl, opts, &netCut{})
			b := newLockerWith(t, lurl, opts, &netCut{})
			ctx := tctx(t, 60*time.Second)
			k := auditKey("a43-busy")
			ks := []string{k + "/a", k + "/b", k + "/c"}
			m, err := b.TryLockMany(ctx, ks) // makes the rows
			if err != nil {
				t.Fatal(err)
			}
			if !m.Atomic() {
				t.Fatal("a free set was not taken in one step")
			}
			m.Unlock(ctx)

			// Waits, then is granted whole.
			tx := holdRows(t, ctx, url, ks[1])
			got := make(chan error, 1)
			var set *lock.MultiLease
			go func() {
				var err error
				set, err = a.TryLockMany(ctx, ks)
				got <- err
			}()
			time.Sleep(400 * time.Millisecond)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("a set that waited for a busy row: %v", err)
			}
			if !set.Atomic() {
				t.Error("the set was not taken in one step")
			}
			for i, h := range rowHolders(t, url, ks...) {
				tok, _ := set.Token(ks[i])
				if h == "" || tok == 0 {
					t.Errorf("after the set, %s has holder %q, token %d", ks[i], h, tok)
				}
			}
			set.Unlock(ctx)

			// Cancelled while it waits: returns by its context's end,
			// and leaves nothing once its step has run.
			tx = holdRows(t, ctx, url, ks[0])
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = a.TryLockMany(cctx, ks)
			if took := time.Since(start); took > time.Second {
				t.Errorf("a cancelled set returned %v after its start (context: 300ms)", took)
			}
			if err == nil || !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("a set cancelled behind a busy row: %v, want ErrNotAcquired", err)
			}
			time.Sleep(700 * time.Millisecond)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the rows free after the cancelled set", 10*time.Second, func() bool {
				h := rowHolders(t, url, ks...)
				return h[0] == "" && h[1] == "" && h[2] == ""
			})
			time.Sleep(500 * time.Millisecond) // a late grant would show now
			if h := rowHolders(t, url, ks...); h[0] != "" || h[1] != "" || h[2] != "" {
				t.Errorf("a cancelled set left holders %q", h)
			}
			after, err := b.TryLockMany(ctx, ks)
			if err != nil {
				t.Fatalf("the keys of a cancelled set are not free: %v", err)
			}
			after.Unlock(ctx)
		})
	}
}

// TestAudit43PGSetLateAfterCleanup: a TryLockMany whose step is held in
// the network until after lock's clean-up (a Release per lease) ran is
// refused when it reaches the server: it grants nothing.
func TestAudit43PGSetLateAfterCleanup(t *testing.T) {
	url := serverURL(t)
	px := newPGProxy(t, serverAddr(t, url))
	a := proxiedLocker(t, url, px, 4, nil)
	b, _ := driverLocker(t, url, nil)
	ctx := tctx(t, 60*time.Second)
	k := auditKey("a43-late")
	ks := []string{k + "/a", k + "/b"}
	m, err := a.TryLockMany(ctx, ks) // warms the pool, makes the rows
	if err != nil {
		t.Fatal(err)
	}
	m.Unlock(ctx)
	px.holdAll()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := a.TryLockMany(cctx, ks); err == nil {
		t.Fatal("a set whose step was held was granted")
	}
	if px.heldBytes() == 0 {
		t.Fatal("nothing was held: the test proves nothing")
	}
	raw := rawPool(t, url)
	waitFor(t, "the clean-up's tombstones", 10*time.Second, func() bool {
		var n int
		if err := raw.QueryRow(ctx, "SELECT count(*) FROM dlock.voids WHERE key = ANY ($1)", ks).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= len(ks)
	})
	px.deliver()
	time.Sleep(time.Second) // the late step runs
	if h := rowHolders(t, url, ks...); h[0] != "" || h[1] != "" {
		t.Errorf("a set's step delivered after its clean-up left holders %q", h)
	}
	after, err := b.TryLockMany(ctx, ks)
	if err != nil {
		t.Fatalf("the keys are not free: %v", err)
	}
	after.Unlock(ctx)
}

// TestAudit43PGSetsAnyOrder: sets of the same keys given to AcquireSet in
// every order, and single-key Locks of those keys, run at once, on keys
// whose rows are new every 100 ms (so the sets also make the rows): no
// step fails (a deadlock would: 40P01), no key has two holders, and each
// key's tokens rise from holder to holder.
func TestAudit43PGSetsAnyOrder(t *testing.T) {
	url := serverURL(t)
	ctx := tctx(t, 60*time.Second)
	base := auditKey("a43-order")
	start := time.Now()
	keysNow := func() []string {
		r := int(time.Since(start) / (100 * time.Millisecond))
		return []string{fmt.Sprintf("%s/%d/a", base, r), fmt.Sprintf("%s/%d/b", base, r), fmt.Sprintf("%s/%d/c", base, r)}
	}
	var (
		mu     sync.Mutex
		holder = map[string]string{}
		last   = map[string]uint64{}
		sets   int
	)
	enter := func(who, key string, tok uint64) {
		mu.Lock()
		defer mu.Unlock()
		if h, ok := holder[key]; ok {
			t.Errorf("%s granted %s while %s holds it", who, key, h)
		}
		if tok <= last[key] {
			t.Errorf("%s granted %s with token %d after %d", who, key, tok, last[key])
		}
		holder[key], last[key] = who, tok
	}
	leave := func(key string) {
		mu.Lock()
		defer mu.Unlock()
		delete(holder, key)
	}
	end := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for w := range 4 {
		_, d := driverLocker(t, url, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("set%d", w)
			for time.Now().Before(end) {
				ks := keysNow()
				rand.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
				ls := make([]*driver.Lease, len(ks))
				for i, k := range ks {
					ls[i] = &driver.Lease{Key: k, Owner: auditKey("o"), Mode: driver.Exclusive, TTL: 30 * time.Second}
				}
				err := d.AcquireSet(ctx, ls)
				if errors.Is(err, driver.ErrHeld) {
					continue
				}
				if err != nil {
					var pe *pgconn.PgError
					errors.As(err, &pe)
					t.Errorf("%s: AcquireSet of %q: %v (%+v)", who, ks, err, pe)
					return
				}
				for _, l := range ls {
					enter(who, l.Key, l.Token)
				}
				mu.Lock()
				sets++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				for _, l := range ls {
					leave(l.Key)
					if err := d.Release(ctx, l); err != nil {
						t.Errorf("%s: Release of %s: %v", who, l.Key, err)
					}
				}
			}
		}()
	}
	for w := range 3 {
		l, _ := driverLocker(t, url, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("single%d", w)
			for time.Now().Before(end) {
				k := keysNow()[rand.IntN(3)]
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				ls, err := l.Lock(lctx, k)
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("%s: Lock of %s: %v", who, k, err)
						return
					}
					continue
				}
				enter(who, k, ls.Token())
				time.Sleep(time.Millisecond)
				leave(k)
				if err := ls.Unlock(ctx); err != nil {
					t.Errorf("%s: Unlock of %s: %v", who, k, err)
				}
			}
		}()
	}
	wg.Wait()
	if sets == 0 {
		t.Error("no set was granted: the test proves nothing")
	}
	t.Logf("%d sets granted", sets)
}

// TestAudit43PGSetVsHoldsGrantOrder: a user's transaction that checks the
// leases of two keys with holds_grant (FOR KEY SHARE of each row), the
// second key first, while another client's set of the same keys waits
// between its two checks: the set holds the first key's row FOR UPDATE
// and waits for the second's, the user's check of the first waits for
// the set. Single-key steps lock one row and never wait in such a cycle;
// here PostgreSQL breaks it after deadlock_timeout by failing one of
// them. Neither may fail: the user's transaction must commit, and the
// set must be refused as held (its keys are).
func TestAudit43PGSetVsHoldsGrantOrder(t *testing.T) {
	url := serverURL(t)
	h, _ := driverLocker(t, url, nil)
	s, _ := driverLocker(t, url, nil)
	ctx := tctx(t, 60*time.Second)
	k := auditKey("a43-fence")
	k1, k2 := k+"/a", k+"/b"
	l1, err := h.Lock(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := h.Lock(ctx, k2)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := rawPool(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", k2, int64(l2.Token())).Scan(&ok); err != nil || !ok {
		t.Fatalf("holds_grant(%s): %v, %v", k2, ok, err)
	}
	set := make(chan error, 1)
	go func() {
		m, err := s.TryLockMany(ctx, []string{k1, k2})
		if err == nil {
			m.Unlock(ctx)
		}
		set <- err
	}()
	time.Sleep(300 * time.Millisecond) // the set holds k1's row, waits for k2's
	var userErr error
	if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", k1, int64(l1.Token())).Scan(&ok); err != nil || !ok {
		userErr = fmt.Errorf("holds_grant(%s): %v, %v", k1, ok, err)
	} else {
		userErr = tx.Commit(ctx)
	}
	if userErr != nil {
		t.Errorf("the user's transaction that checked two leases failed: %v", userErr)
	}
	tx.Rollback(ctx)
	if err := <-set; !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLockMany of two held keys: %v, want ErrHeld", err)
	}
	l1.Unlock(ctx)
	l2.Unlock(ctx)
}

// TestAudit43PGSetRestrictedRoles: an application role with only the
// documented rights (USAGE on the schema, SELECT, INSERT, UPDATE and
// DELETE on its tables, EXECUTE on its functions), in a database where a
// DBA revoked the language plpgsql's USAGE from PUBLIC (which a role
// needs for a DO block, not to call a function), takes a set in one step
// and is refused over a held key; a role with only SELECT grants nothing.
func TestAudit43PGSetRestrictedRoles(t *testing.T) {
	url := envDB(t, "audit43_roles")
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	drop := func() {
		for _, r := range []string{"audit43_app", "audit43_ro"} {
			raw.Exec(context.Background(), "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '"+r+"') THEN EXECUTE 'DROP OWNED BY "+r+"'; EXECUTE 'DROP ROLE "+r+"'; END IF; END $$")
		}
	}
	drop()
	t.Cleanup(drop)
	script, err := SchemaSQL("dlock")
	if err != nil {
		t.Fatal(err)
	}
	execAll(t, raw,
		script,
		"CREATE ROLE audit43_app LOGIN PASSWORD '"+rolePassword+"'",
		"CREATE ROLE audit43_ro LOGIN PASSWORD '"+rolePassword+"'",
		"GRANT USAGE ON SCHEMA dlock TO audit43_app, audit43_ro",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA dlock TO audit43_app",
		"GRANT SELECT ON ALL TABLES IN SCHEMA dlock TO audit43_ro",
		"REVOKE USAGE ON LANGUAGE plpgsql FROM PUBLIC",
	)
	app := roleLocker(t, asRole(t, url, "audit43_app"), &Options{NoCreate: true})
	k := auditKey("a43-roles")
	ks := []string{k + "/a", k + "/b"}
	m, err := app.TryLockMany(ctx, ks)
	if err != nil {
		t.Fatalf("TryLockMany of the application role: %v", err)
	}
	if !m.Atomic() {
		t.Error("the application role's set was not taken in one step")
	}
	if _, err := app.TryLockMany(ctx, ks); !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLockMany over the role's own held set: %v, want ErrHeld", err)
	}
	ro := roleLocker(t, asRole(t, url, "audit43_ro"), &Options{NoCreate: true})
	k2 := auditKey("a43-roles-ro")
	if _, err := ro.TryLockMany(ctx, []string{k2 + "/a", k2 + "/b"}); err == nil {
		t.Error("a role with only SELECT took a set")
	}
	if h := rowHolders(t, url, k2+"/a", k2+"/b"); h[0] != "" || h[1] != "" {
		t.Errorf("a role with only SELECT left holders %q", h)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAudit43PGSetWaitKeepsRenewals: a set that waits for a busy row (a
// user's transaction checked that key's lease for 2.5 s) holds none of
// its other rows meanwhile: the holder of another of its keys, on a 1 s
// TTL, keeps renewing and does not lose its lease; the set is then
// refused as held.
func TestAudit43PGSetWaitKeepsRenewals(t *testing.T) {
	url := serverURL(t)
	h, _ := driverLocker(t, url, &Options{Options: lock.Options{TTL: time.Second}})
	g, _ := driverLocker(t, url, nil)
	s, _ := driverLocker(t, url, nil)
	ctx := tctx(t, 60*time.Second)
	k := auditKey("a43-renew")
	k1, k2 := k+"/a", k+"/b"
	l1, err := h.Lock(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := g.Lock(ctx, k2)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := rawPool(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", k2, int64(l2.Token())).Scan(&ok); err != nil || !ok {
		t.Fatalf("holds_grant(%s): %v, %v", k2, ok, err)
	}
	set := make(chan error, 1)
	go func() {
		_, err := s.TryLockMany(ctx, []string{k1, k2})
		set <- err
	}()
	time.Sleep(2500 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.Err(); err != nil {
		t.Errorf("the holder of %s lost its lease while a set waited for %s: %v", k1, k2, err)
	}
	if err := <-set; !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLockMany of two held keys: %v, want ErrHeld", err)
	}
	l1.Unlock(ctx)
	l2.Unlock(ctx)
}

// TestAudit43PGSetQuotedKeys: keys that hold the set's dollar-quote tags
// ($dlock$, $$), quotes and backslashes are carried as themselves: the
// set grants exactly those keys in one step, and a set of other keys
// with the same characters is not refused by it.
func TestAudit43PGSetQuotedKeys(t *testing.T) {
	url := serverURL(t)
	a, _ := driverLocker(t, url, nil)
	ctx := tctx(t, 30*time.Second)
	k := auditKey("a43-quote")
	ks := []string{k + "/$dlock$ END $dlock$; SELECT 1", k + "/$$'\\", k + "/$dlock0$'"}
	m, err := a.TryLockMany(ctx, ks)
	if err != nil {
		t.Fatalf("TryLockMany of keys with quotes: %v", err)
	}
	if !m.Atomic() {
		t.Error("the set was not taken in one step")
	}
	for i, h := range rowHolders(t, url, ks...) {
		if h == "" {
			t.Errorf("%q has no holder after the set", ks[i])
		}
	}
	other := []string{k + "/$dlock$", k + "/$dlock0$"}
	m2, err := a.TryLockMany(ctx, other)
	if err != nil {
		t.Fatalf("TryLockMany of other keys: %v", err)
	}
	m2.Unlock(ctx)
	m.Unlock(ctx)
}

// TestAudit43PGSetErrorMidway: a set whose second key's step fails with
// an error (its counter at the top of bigint: the next token is out of
// range) after the first key's step granted it commits nothing, directly
// and through PgBouncer's transaction pooling: the first key is not
// held (with no clean-up after the step), and the Locker's next sets
// (on other keys) work on the same pool.
func TestAudit43PGSetErrorMidway(t *testing.T) {
	for _, tc := range []string{"Direct", "PgBouncer"} {
		t.Run(tc, func(t *testing.T) {
			url := serverURL(t)
			lurl, opts := url, &Options{}
			if tc == "PgBouncer" {
				lurl, opts = testserver.StartPgBouncer(t, testserver.SharedPostgres(t), "transaction").URL(), &Options{TransactionPooling: true}
			}
			a, d := driverLocker(t, lurl, opts)
			ctx := tctx(t, 30*time.Second)
			k := auditKey("a43-midway")
			ks := []string{k + "/a", k + "/b"}
			l, err := a.TryLock(ctx, k+"/install") // installs the schema
			if err != nil {
				t.Fatal(err)
			}
			l.Unlock(ctx)
			if _, err := rawPool(t, url).Exec(ctx, "INSERT INTO dlock.keys (key, counter) VALUES ($1, NULL), ($2, 9223372036854775807)", ks[0], ks[1]); err != nil {
				t.Fatal(err)
			}
			// The driver's step, without lock's clean-up after it.
			if err := d.AcquireSet(ctx, setLeases(ks...)); err == nil || errors.Is(err, driver.ErrHeld) {
				t.Errorf("a set whose second key's step fails: %v, want its error", err)
			}
			if h := rowHolders(t, url, ks...); h[0] != "" || h[1] != "" {
				t.Errorf("a set that failed midway left holders %q", h)
			}
			k2 := auditKey("a43-midway2")
			for range 3 {
				m, err := a.TryLockMany(ctx, []string{k2 + "/a", k2 + "/b"})
				if err != nil {
					t.Fatalf("a set after the failed one: %v", err)
				}
				m.Unlock(ctx)
			}
		})
	}
}

// TestAudit43PGSetBusyRowsProgress: the set's rows are kept busy in turn
// (two transactions of the test's hold one row each FOR SHARE for 100 ms,
// overlapping, again and again), so that every try of all of them finds
// one busy: the set still is granted (after lockRounds rounds it locks
// them in order, holding the first while it waits for the next) well
// within its context.
func TestAudit43PGSetBusyRowsProgress(t *testing.T) {
	url := serverURL(t)
	a, _ := driverLocker(t, url, nil)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	k := auditKey("a43-busy-turns")
	ks := []string{k + "/a", k + "/b"}
	m, err := a.TryLockMany(ctx, ks) // makes the rows
	if err != nil {
		t.Fatal(err)
	}
	m.Unlock(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, key := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := pgx.BeginFunc(ctx, raw, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SELECT 1 FROM dlock.keys WHERE key = $1 FOR SHARE", key); err != nil {
						return err
					}
					time.Sleep(100 * time.Millisecond)
					return nil
				})
				if err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	m, err = a.TryLockMany(cctx, ks)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("a set on rows kept busy in turn: %v after %v", err, took)
	}
	t.Logf("granted after %v", took)
	if took > 5*time.Second {
		t.Errorf("a set on rows kept busy in turn took %v", took)
	}
	m.Unlock(ctx)
}

// TestAudit43PGSetBadInput: AcquireSet refuses, with ErrInvalid and no
// panic, before any I/O, a set that is empty, holds a nil lease, or names
// a key twice (lock passes none of these; another caller of the driver
// might).
func TestAudit43PGSetBadInput(t *testing.T) {
	url := serverURL(t)
	l, d := driverLocker(t, url, nil)
	ctx := tctx(t, 30*time.Second)
	k := auditKey("a43-bad")
	installed, err := l.TryLock(ctx, k+"/install") // installs the schema
	if err != nil {
		t.Fatal(err)
	}
	installed.Unlock(ctx)
	for name, ls := range map[string][]*driver.Lease{
		"empty":     nil,
		"nil":       {setLeases(k + "/a")[0], nil},
		"duplicate": setLeases(k+"/a", k+"/b", k+"/a"),
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("AcquireSet panicked: %v", r)
					}
				}()
				err = d.AcquireSet(ctx, ls)
			}()
			if !errors.Is(err, driver.ErrInvalid) {
				t.Errorf("AcquireSet: %v, want ErrInvalid", err)
			}
			if h := rowHolders(t, url, k+"/a", k+"/b"); h[0] != "" || h[1] != "" {
				t.Errorf("a refused set left holders %q", h)
			}
		})
	}
}
