package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestEnv38SchemaDroppedReinstalled: a Locker that ran before its schema
// was dropped (a restore, an operator), or one of its tables, installs
// it again at its next call, or with NoCreate says what to run. It
// cached "installed" for its life and failed every call (3F000, 42883,
// 42P01) until it closed, while a new Locker on the same URL worked.
func TestEnv38SchemaDroppedReinstalled(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	for _, tc := range []struct {
		name, schema, drop string
	}{
		{"Schema", "env38_drop_schema", "DROP SCHEMA env38_drop_schema CASCADE"},
		{"Function", "env38_drop_function", "DROP FUNCTION env38_drop_function.acquire"},
		{"Table", "env38_drop_table", "DROP TABLE env38_drop_table.voids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tctx(t, 60*time.Second)
			t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+tc.schema+" CASCADE") })
			l := newLockerWith(t, url, &Options{Schema: tc.schema}, &netCut{})
			key := auditKey("env38-drop")
			lockUnlock(t, ctx, l, key)
			if _, err := raw.Exec(ctx, tc.drop); err != nil {
				t.Fatal(err)
			}
			var errs []error
			for range 3 {
				ls, err := l.TryLock(ctx, key)
				if err == nil {
					ls.Unlock(ctx)
					break
				}
				errs = append(errs, err)
			}
			if len(errs) > 1 {
				t.Fatalf("after %s, the Locker still fails: %v", tc.drop, errs)
			}
			t.Logf("after %s: %v", tc.drop, errs)
			// A held key and a waiter, on the schema made again.
			lockUnlock(t, ctx, l, key)
		})
	}
	t.Run("NoCreate", func(t *testing.T) {
		ctx := tctx(t, 60*time.Second)
		const schema = "env38_drop_nocreate"
		t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
		script, err := SchemaSQL(schema)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(ctx, script); err != nil {
			t.Fatal(err)
		}
		l := newLockerWith(t, url, &Options{Schema: schema, NoCreate: true}, &netCut{})
		key := auditKey("env38-drop-nocreate")
		lockUnlock(t, ctx, l, key)
		if _, err := raw.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Fatal(err)
		}
		l.TryLock(ctx, key) // may fail with the server's error
		_, err = l.TryLock(ctx, key)
		if err == nil || !strings.Contains(err.Error(), "NoCreate") || !strings.Contains(err.Error(), "SchemaSQL") {
			t.Fatalf("TryLock with the schema dropped under NoCreate: %v; want the message saying to run SchemaSQL", err)
		}
		if _, err := raw.Exec(ctx, script); err != nil {
			t.Fatal(err)
		}
		lockUnlock(t, ctx, l, key)
	})
}

func lockUnlock(t *testing.T, ctx context.Context, l *lock.Locker, key string) {
	t.Helper()
	ls, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEnv38FailedStepKeepsConnection: a step that fails inside its
// transaction leaves its connection idle in the pool (rolled back), not
// inside an aborted transaction, nor dropped: the next call runs on the
// same server session.
func TestEnv38FailedStepKeepsConnection(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	const schema = "env38_failed_step"
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l := New(pool, &Options{Schema: schema})
	defer l.Close()
	key := auditKey("env38-failed-step")
	lockUnlock(t, ctx, l, key)
	pid := func() int {
		var p int
		if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p); err != nil {
			t.Fatalf("the pool's connection after a failed step: %v", err)
		}
		return p
	}
	before := pid()
	// A step that fails after its BEGIN: the function raises (a named
	// owner's attempt runs acquire3, whose begin_key3 calls
	// at_read_committed).
	if _, err := raw.Exec(ctx, "CREATE OR REPLACE FUNCTION "+schema+".at_read_committed() RETURNS void LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'env38 failure'; END $$"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, key, lock.WithOwner("env38")); err == nil || !strings.Contains(err.Error(), "env38 failure") {
		t.Fatalf("TryLock with a failing function: %v; want its error", err)
	}
	if after := pid(); after != before {
		t.Fatalf("the failed step's connection was dropped (server session %d, then %d)", before, after)
	}
	if s := pool.Stat(); s.TotalConns() != 1 {
		t.Fatalf("%d connections in the pool, want 1", s.TotalConns())
	}
}
