package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestEnv38Timeouts: a database's statement_timeout, lock_timeout or
// idle_in_transaction_session_timeout does not fail the steps that wait
// for a busy key's row (here behind a user's transaction that checked
// the lease for 400 ms): the call's context bounds them. A step waiting
// 50 ms failed with 57014 (statement_timeout) or 55P03 (lock_timeout).
func TestEnv38Timeouts(t *testing.T) {
	for _, tc := range []struct{ name, db, setting string }{
		{"StatementTimeout", "env38_stmt_timeout", "statement_timeout=50ms"},
		{"LockTimeout", "env38_lock_timeout", "lock_timeout=20ms"},
		{"IdleInTransaction", "env38_idle_timeout", "idle_in_transaction_session_timeout=100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := envDB(t, tc.db, tc.setting)
			raw := rawPool(t, url)
			ctx := tctx(t, 60*time.Second)
			a := newTestLocker(t, url, nil, &netCut{})
			b := newTestLocker(t, url, nil, &netCut{})
			key := auditKey("env38-timeout")
			held, err := a.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := raw.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; SET LOCAL idle_in_transaction_session_timeout = 0"); err != nil {
				t.Fatal(err)
			}
			var ok bool
			if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(held.Token())).Scan(&ok); err != nil || !ok {
				t.Fatalf("holds_grant: %v, %v", ok, err)
			}
			try := make(chan error, 1)
			go func() {
				_, err := b.TryLock(ctx, key)
				try <- err
			}()
			unlock := make(chan error, 1)
			go func() { unlock <- held.Unlock(ctx) }()
			waitFor(t, "both steps waiting for the key's row", 10*time.Second, func() bool { return lockWaits(t, raw, tc.db) == 2 })
			time.Sleep(400 * time.Millisecond)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-unlock; err != nil {
				t.Errorf("Unlock that waited for the key's row: %v", err)
			}
			if err := <-try; err != nil && !errors.Is(err, lock.ErrHeld) {
				t.Errorf("TryLock that waited for the key's row: %v; want a grant or ErrHeld", err)
			}
			contend(t, url, Options{})
		})
	}
}

// TestEnv38RoleRights: a role that may not create the schema is told
// what to run; a role without rights on a schema another role owns is
// told what it needs, and gets nothing; with the rights granted it
// works; a schema of an older version owned by another role is not
// used (nor half updated), and the error says what to run.
func TestEnv38RoleRights(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	ctx := tctx(t, 60*time.Second)
	url := envDB(t, "env38_rights")
	raw := rawPool(t, url)
	roles := []string{"env38_owner", "env38_app"}
	drop := func() {
		for _, r := range roles {
			pg.Exec("DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '" + r + "') THEN EXECUTE 'DROP OWNED BY " + r + " CASCADE'; EXECUTE 'DROP ROLE " + r + "'; END IF; END $$")
		}
	}
	drop()
	t.Cleanup(drop)
	drop2 := func() {
		raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS env38_owned CASCADE; DROP SCHEMA IF EXISTS env38_mine CASCADE")
	}
	t.Cleanup(drop2)
	execAll(t, raw,
		"CREATE ROLE env38_owner LOGIN PASSWORD '"+rolePassword+"'",
		"CREATE ROLE env38_app LOGIN PASSWORD '"+rolePassword+"'",
		"GRANT CREATE ON DATABASE env38_rights TO env38_owner",
	)
	appURL := asRole(t, url, "env38_app")
	key := auditKey("env38-rights")

	t.Run("NoCreateRight", func(t *testing.T) {
		l := newLockerWith(t, appURL, &Options{Schema: "env38_mine"}, &netCut{})
		_, err := l.TryLock(ctx, key)
		if err == nil {
			t.Fatal("TryLock of a role that may not create the schema succeeded")
		}
		for _, want := range []string{"CREATE right", "create_schema=false", "dlock schema URL with schema=env38_mine", `SchemaSQL("env38_mine")`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("TryLock of a role that may not create the schema: %v; want the error to say %q", err, want)
			}
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("TryLock of a role that may not create the schema: %v; want the server's 42501 as a *pgconn.PgError", err)
		}
		t.Log(err)
	})
	t.Run("NoCreateSet", func(t *testing.T) {
		l := newLockerWith(t, appURL, &Options{Schema: "env38_mine", NoCreate: true}, &netCut{})
		_, err := l.TryLock(ctx, key)
		for _, want := range []string{"create_schema=false", "dlock schema URL with schema=env38_mine"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("TryLock with NoCreate and no schema: %v; want the error to say %q", err, want)
			}
		}
	})

	script, err := SchemaSQL("env38_owned")
	if err != nil {
		t.Fatal(err)
	}
	owner := rawPool(t, asRole(t, url, "env38_owner"))
	if _, err := owner.Exec(ctx, script); err != nil {
		t.Fatal(err)
	}
	t.Run("NoRights", func(t *testing.T) {
		l := newLockerWith(t, appURL, &Options{Schema: "env38_owned"}, &netCut{})
		_, err := l.TryLock(ctx, key)
		if err == nil || !strings.Contains(err.Error(), "USAGE") {
			t.Fatalf("TryLock of a role without rights on the schema: %v; want the error to say what it needs", err)
		}
		t.Log(err)
	})
	t.Run("Granted", func(t *testing.T) {
		execAll(t, owner,
			"GRANT USAGE ON SCHEMA env38_owned TO env38_app",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA env38_owned TO env38_app",
		)
		contend(t, appURL, Options{Schema: "env38_owned"})
	})
	t.Run("OlderVersion", func(t *testing.T) {
		old := strings.Replace(script, fmt.Sprintf("AS $$ SELECT %d $$", schemaVersion), "AS $$ SELECT 1 $$", 1)
		if old == script {
			t.Fatal("the script's version() was not found")
		}
		if _, err := owner.Exec(ctx, old); err != nil {
			t.Fatal(err)
		}
		l := newLockerWith(t, appURL, &Options{Schema: "env38_owned"}, &netCut{})
		_, err := l.TryLock(ctx, key)
		if err == nil || !strings.Contains(err.Error(), "SchemaSQL") {
			t.Fatalf("TryLock on an older schema another role owns: %v; want the error to say what to run", err)
		}
		t.Log(err)
		var v int
		if err := raw.QueryRow(ctx, "SELECT env38_owned.version()").Scan(&v); err != nil || v != 1 {
			t.Fatalf("version() %d, %v after the refused update; want 1", v, err)
		}
	})
}

// TestEnv38ServerClockOnly: every expiry is judged by the server's clock,
// so a client whose clock is off (or whose session has another time
// zone) neither shortens nor lengthens a grant: the functions a client
// calls take durations, never a time, and a grant made by a session in
// a far time zone ends its TTL after it began, by the server's clock.
func TestEnv38ServerClockOnly(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	l := newTestLocker(t, url+"&timezone=Pacific%2FKiritimati", nil, &netCut{})
	key := auditKey("env38-clock")
	const ttl = 7 * time.Second
	ls, err := l.TryLock(ctx, key, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Unlock(ctx)
	var span, left time.Duration
	if err := raw.QueryRow(ctx, "SELECT expires - since, expires - clock_timestamp() FROM dlock.keys WHERE key = $1 AND holder IS NOT NULL", key).Scan(&span, &left); err != nil {
		t.Fatal(err)
	}
	if span != ttl || left > ttl || left < ttl-5*time.Second {
		t.Fatalf("grant of %v: it ends %v after it began and %v from now, by the server's clock", ttl, span, left)
	}
	var timed []string
	rows, err := raw.Query(ctx, `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'dlock' AND p.proname IN ('acquire', 'check_turn', 'release', 'refresh', 'resume', 'sweep', 'holds_grant')
		AND EXISTS (SELECT 1 FROM unnest(p.proargtypes) a WHERE a IN ('timestamptz'::regtype, 'timestamp'::regtype))`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		timed = append(timed, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(timed) > 0 {
		t.Fatalf("functions a client calls take a time from it: %v", timed)
	}
}

// TestEnv38SynchronousCommitOff: a database's synchronous_commit = off
// does not let a crash of the server lose a grant it reported (the
// holder counts on it; another client would be granted the key after
// crash recovery). The step commits with synchronous_commit on.
func TestEnv38SynchronousCommitOff(t *testing.T) {
	pg := testserver.StartPostgres(t, &testserver.PostgresOptions{Settings: []string{"wal_writer_delay=10000ms", "wal_writer_flush_after=0"}})
	pg.RequireFaults(t)
	if _, err := pg.Exec("ALTER DATABASE postgres SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	ctx := tctx(t, 120*time.Second)
	lost := 0
	for i := range 3 {
		l := newTestLocker(t, pg.URL(), nil, &netCut{})
		key := auditKey("env38-sync")
		ls, err := l.TryLock(ctx, key, lock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.Restart(); err != nil { // SIGKILL, then crash recovery
			t.Fatal(err)
		}
		raw := rawPool(t, pg.URL())
		var n int
		if err := raw.QueryRow(ctx, "SELECT count(*) FROM dlock.keys WHERE key = $1 AND token = $2 AND holder IS NOT NULL", key, int64(ls.Token())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			lost++
			t.Errorf("crash %d: the grant of %s (token %d) is gone after crash recovery", i, key, ls.Token())
		}
		l.Close()
	}
	if lost > 0 {
		t.Fatalf("%d of 3 grants lost by a crash under synchronous_commit = off", lost)
	}
}
