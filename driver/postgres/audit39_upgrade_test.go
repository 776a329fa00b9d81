package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
)

// openAudit39 skips a test that shows an open defect unless
// DLOCK_AUDIT39_OPEN=1.
func openAudit39(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("DLOCK_AUDIT39_OPEN") != "1" {
		t.Skip("open defect (audit 39): " + what + "; run with DLOCK_AUDIT39_OPEN=1")
	}
}

// rawConn is one connection of the test's own, closed at cleanup.
func rawConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// lockWaiters is how many backends wait for a heavyweight lock now.
func lockWaiters(t testing.TB, c *pgx.Conn, pids ...uint32) int {
	t.Helper()
	n := 0
	for _, pid := range pids {
		var w int
		if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", int(pid)).Scan(&w); err != nil {
			t.Fatal(err)
		}
		n += w
	}
	return n
}

// TestAudit39UpgradeBlockedV2Step: a version 2 step that starts while
// the version 3 install runs (after its ALTER TABLE keys, before its
// commit) has already entered version 2's acquire and begin_key when it
// blocks on the keys table: it runs their old bodies once the install
// commits, not the failing replacements. If a version 3 grant lands in
// the key's row first (here a version 3 step that queued for the table
// before it; in the field the race of any version 3 step right after the
// commit), the old acquire, which never reads the row, grants the key
// in entries too: two live grants.
func TestAudit39UpgradeBlockedV2Step(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "audit39_up"
	raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	if _, err := raw.Exec(ctx, strings.ReplaceAll(schemaV2, "{{schema}}", schema)); err != nil {
		t.Fatal(err)
	}
	key := auditKey("audit39-upgrade")
	v2c, v3c, inst, watch := rawConn(t, url), rawConn(t, url), rawConn(t, url), rawConn(t, url)
	v2step := func(owner string) (int64, error) {
		var tok int64
		err := pgx.BeginTxFunc(ctx, v2c, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT tok FROM "+schema+".acquire($1, $2, 0, 0, 60000000, false, false, 3000000)", key, owner).Scan(&tok)
		})
		return tok, err
	}
	if _, err := raw.Exec(ctx, "INSERT INTO "+schema+".keys (key) VALUES ($1)", key); err != nil {
		t.Fatal(err)
	}

	// The version 3 install, as install() runs it, held open.
	script, _ := SchemaSQL(schema)
	itx, err := inst.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := itx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "dlock schema "+schema); err != nil {
		t.Fatal(err)
	}
	if _, err := itx.Exec(ctx, script); err != nil {
		t.Fatal(err)
	}
	// A version 3 step queues for the keys table first...
	v3tx, err := v3c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer v3tx.Rollback(ctx)
	v3locked := make(chan error, 1)
	go func() {
		_, err := v3tx.Exec(ctx, "LOCK TABLE "+schema+".keys IN EXCLUSIVE MODE")
		v3locked <- err
	}()
	waitFor(t, "the version 3 step to queue", 5*time.Second, func() bool { return lockWaiters(t, watch, v3c.PgConn().PID()) == 1 })
	// ... then a version 2 step starts: it enters acquire and blocks.
	type res struct {
		tok int64
		err error
	}
	v2done := make(chan res, 1)
	go func() {
		tok, err := v2step(strings.Repeat("b", 32))
		v2done <- res{tok, err}
	}()
	waitFor(t, "the version 2 step to block", 5*time.Second, func() bool { return lockWaiters(t, watch, v2c.PgConn().PID()) == 1 })
	if err := itx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-v3locked; err != nil {
		t.Fatal(err)
	}
	var tok3 int64
	if err := v3tx.QueryRow(ctx, "SELECT tok FROM "+schema+".lock3($1, $2, 60000000, false, 3000000, '')", key, strings.Repeat("c", 32)).Scan(&tok3); err != nil || tok3 == 0 {
		t.Fatalf("the version 3 grant: %d, %v", tok3, err)
	}
	if err := v3tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-v2done
	live := entriesOf(t, raw, schema, key)
	t.Logf("version 3 token %d; version 2 step: token %d, %v; the key: %q", tok3, r.tok, r.err, live)
	if r.err == nil && r.tok > 0 {
		t.Fatalf("two holders: the version 3 grant in the row (token %d) and the version 2 step's grant in entries (token %d), both live: %q", tok3, r.tok, live)
	}
}

// TestAudit39InstallRaceOlderClient: on a database with no schema yet, a
// version 2 client and a version 3 client start together. Both read the
// schema missing; the version 3 client's install commits first; the
// version 2 client's install (which, like version 3's, runs its script
// under the advisory lock without reading the version again) then puts
// version 2's functions back over version 3's superseded ones, and
// version() says 2. Version 3 clients that already installed keep
// granting in the key's row; version 2's acquire never reads it: two
// holders.
func TestAudit39InstallRaceOlderClient(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := envDB(t, "audit39_race_v2")
	raw := rawPool(t, url)
	l3 := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("audit39-race-v2")
	held, err := l3.Lock(ctx, key, lock.WithTTL(time.Minute)) // installs version 3
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	// The version 2 client read the version (missing) before that
	// install committed; its install now runs, as version 2's install()
	// does: settings, the advisory lock, the script.
	if err := pgx.BeginTxFunc(ctx, raw, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "dlock schema dlock"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, strings.ReplaceAll(schemaV2, "{{schema}}", "dlock"))
		return err
	}); err != nil {
		t.Logf("the version 2 install over version 3 failed (as it should): %v", err)
		return
	}
	var v int
	raw.QueryRow(ctx, "SELECT dlock.version()").Scan(&v)
	var tok int64
	err = pgx.BeginTxFunc(ctx, raw, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT tok FROM dlock.acquire($1, $2, 0, 0, 60000000, false, false, 3000000)", key, strings.Repeat("b", 32)).Scan(&tok)
	})
	t.Logf("version() %d; the version 2 client's acquire: token %d, %v; the key: %q", v, tok, err, entriesOf(t, raw, "dlock", key))
	if err == nil && tok > 0 {
		t.Fatalf("two holders: version 3's lease (token %d) and version 2's grant (token %d)", held.Token(), tok)
	}
}

// TestAudit39InstallRaceNewerSchema: the same race one version on: this
// client reads the schema missing while a newer client installs (here a
// script whose version() says schemaVersion+1, held open under the advisory
// lock); this client's install then runs after it commits. It must not
// put its own functions over a newer schema's.
func TestAudit39InstallRaceNewerSchema(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := envDB(t, "audit39_race_v4")
	c := rawConn(t, url)
	watch := rawConn(t, url)
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	script, _ := SchemaSQL("dlock")
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "dlock schema dlock"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, script); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE OR REPLACE FUNCTION dlock.version() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT %d $$", schemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	l := newTestLocker(t, url, nil, &netCut{})
	got := make(chan error, 1)
	go func() {
		ls, err := l.TryLock(ctx, auditKey("audit39-race-v4"))
		if err == nil {
			ls.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "this client's install to wait for the advisory lock", 5*time.Second, func() bool {
		var n int
		watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'advisory'").Scan(&n)
		return n == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-got
	var v int
	if err := watch.QueryRow(ctx, "SELECT dlock.version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	t.Logf("this client's TryLock: %v; version() after: %d", err, v)
	if v != schemaVersion+1 {
		t.Fatalf("this client's install replaced a newer schema's functions: version() %d, want %d", v, schemaVersion+1)
	}
}
