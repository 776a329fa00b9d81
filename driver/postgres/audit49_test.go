package postgres

import (
	"context"
	"strconv"
	"testing"
	"time"

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
	var last uint64
	var err error
	for range 2 { // the row, and lock9 and unlock9 prepared
		if last, err = checkedCycle(t, l, raw, s, key, last); err != nil {
			t.Fatal(err)
		}
	}
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
		var last uint64
		var err error
		for range 2 {
			if last, err = checkedCycle(t, l, raw, s, key, last); err != nil {
				t.Fatal(err)
			}
		}
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
