package postgres

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// asRole is url with its user set to role, whose password is
// rolePassword (every role of these tests is made with it).
func asRole(t testing.TB, u, role string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.User = url.UserPassword(role, rolePassword)
	return p.String()
}

const rolePassword = "audit-role"

// roleLocker is a Locker of its own pool at url, with o.
func roleLocker(t testing.TB, u string, o *Options) *lock.Locker {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	d, lo := newDriver(pool, o, true)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	return l
}

func execAll(t testing.TB, p *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := p.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestAuditSearchPathOperator: the functions of schema.sql run with the
// caller's search_path and call operators with no exact match in
// pg_catalog (bigint * interval: ttl * interval '1 microsecond';
// numeric * integer in next_token and retry_ms). A role with no right on
// dlock's schema but CREATE on a schema of the application's search_path
// (public, for every role, up to PostgreSQL 14, and after pg_upgrade
// from it) defines an exact-match operator, which the parser prefers:
// here it makes every grant expire an hour ago, so a second client takes
// a key the first one holds. The operator's function runs with the
// application's rights, so it could as well forge tokens or anything
// else.
func TestAuditSearchPathOperator(t *testing.T) {
	u := serverURL(t)
	raw := rawPool(t, u)
	ctx := context.Background()
	const schema = "auditsp"
	script, err := SchemaSQL(schema)
	if err != nil {
		t.Fatal(err)
	}
	drop := func() {
		for _, s := range []string{
			"DROP SCHEMA IF EXISTS " + schema + " CASCADE",
			"DROP OPERATOR IF EXISTS public.* (bigint, interval)",
			"DROP FUNCTION IF EXISTS public.audit_mul(bigint, interval)",
			"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		} {
			raw.Exec(ctx, s)
		}
		for _, r := range []string{"audit_app", "audit_evil"} {
			raw.Exec(ctx, "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '"+r+"') THEN EXECUTE 'DROP OWNED BY "+r+"'; EXECUTE 'DROP ROLE "+r+"'; END IF; END $$")
		}
	}
	drop()
	t.Cleanup(drop)
	execAll(t, raw,
		"CREATE ROLE audit_app LOGIN PASSWORD '"+rolePassword+"'",
		"CREATE ROLE audit_evil LOGIN PASSWORD '"+rolePassword+"'",
		script,
		"GRANT USAGE ON SCHEMA "+schema+" TO audit_app",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+schema+" TO audit_app",
		// PostgreSQL 14 and older grant this to every role.
		"GRANT CREATE ON SCHEMA public TO PUBLIC",
	)

	evil := rawPool(t, asRole(t, u, "audit_evil"))
	if _, err := evil.Exec(ctx, "SELECT * FROM "+schema+".entries"); err == nil {
		t.Fatal("the attacker's role can read dlock's tables: the test would prove nothing")
	}
	execAll(t, evil,
		"CREATE FUNCTION public.audit_mul(bigint, interval) RETURNS interval LANGUAGE sql IMMUTABLE AS $$ SELECT interval '-1 hour' $$",
		"CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = public.audit_mul)",
	)

	app := asRole(t, u, "audit_app")
	o := &Options{Schema: schema, NoCreate: true}
	a1, a2 := roleLocker(t, app, o), roleLocker(t, app, o)
	key := auditKey("audit-searchpath")
	l1, err := a1.Lock(ctx, key, lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Unlock(ctx)
	l2, err := a2.TryLock(ctx, key, lock.WithTTL(10*time.Second))
	if err == nil {
		defer l2.Unlock(ctx)
		select {
		case <-l1.Done():
		default:
			t.Fatalf("two holders of %q: tokens %d and %d, the first lease's Done still open", key, l1.Token(), l2.Token())
		}
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v, want ErrNotAcquired", err)
	}
}

// TestAuditLimitedRoles (held): a role with no right on dlock's schema
// can NOTIFY its channel with a waiter's owner token, which only wakes
// the waiter: its own check_turn keeps it waiting while the key is held.
// A role with USAGE on the schema and EXECUTE on its functions (the
// default) but no right on the tables is refused by every function, which
// runs with its caller's rights.
func TestAuditLimitedRoles(t *testing.T) {
	u := serverURL(t)
	raw := rawPool(t, u)
	ctx := context.Background()
	drop := func() {
		for _, r := range []string{"audit_notify", "audit_exec"} {
			raw.Exec(ctx, "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '"+r+"') THEN EXECUTE 'DROP OWNED BY "+r+"'; EXECUTE 'DROP ROLE "+r+"'; END IF; END $$")
		}
	}
	drop()
	t.Cleanup(drop)
	a := newTestLocker(t, u, nil, &netCut{})
	b := newTestLocker(t, u, nil, &netCut{})
	key := auditKey("audit-roles")
	la, err := a.Lock(ctx, key) // makes the schema too
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	execAll(t, raw,
		"CREATE ROLE audit_notify LOGIN PASSWORD '"+rolePassword+"'",
		"CREATE ROLE audit_exec LOGIN PASSWORD '"+rolePassword+"'",
		"GRANT USAGE ON SCHEMA dlock TO audit_exec",
	)
	bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(bctx, key)
		if err == nil {
			l.Unlock(ctx)
		}
		got <- err
	}()
	var waiter string
	waitFor(t, "b's queue entry", 2*time.Second, func() bool {
		return raw.QueryRow(ctx, "SELECT owner FROM dlock.entries WHERE key = $1 AND NOT granted", key).Scan(&waiter) == nil
	})
	notify := rawPool(t, asRole(t, u, "audit_notify"))
	for range 200 {
		if _, err := notify.Exec(ctx, "SELECT pg_notify('dlock', $1)", waiter); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err == nil {
		t.Fatal("a notification of a role with no right on dlock's schema granted a held key")
	}

	exec := rawPool(t, asRole(t, u, "audit_exec"))
	for _, q := range []string{
		"SELECT * FROM dlock.acquire3($1, 'ffffffffffffffffffffffffffffffff', 0, 0, 60000000, false, false, 3000000, '')",
		"SELECT * FROM dlock.check_turn3($1, 'ffffffffffffffffffffffffffffffff', 0, 0, 60000000, 3000000, '')",
		"SELECT dlock.release3($1, '" + waiter + "', false, 1000, false)",
		"SELECT dlock.holds_grant($1, 1)",
	} {
		if _, err := exec.Exec(ctx, q, key); err == nil {
			t.Errorf("%s: a role without rights on the tables ran it", q)
		}
	}
	if _, err := b.TryLock(ctx, key); err == nil {
		t.Fatal("the key was freed by a role without rights")
	}
}
