package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit44PGInlinedUnderDBASettings: the version 8 step bodies, run
// by a role without CREATE whose defaults a DBA set to serializable
// (or repeatable read), statement_timeout 100 ms,
// idle_in_transaction_session_timeout 200 ms and lock_timeout 10 ms, with a search_path that puts first a schema of
// hostile functions named like the former helpers (row_held, grant_row,
// fits, next_token3, retry_ms3) and like what their written-out SQL
// calls (ceil), each of which raises. Three Lockers
// of that role contend with Lock on one key: no step fails, no hostile
// function runs, no grants overlap, tokens rise.
func TestAudit44PGInlinedUnderDBASettings(t *testing.T) {
	for _, iso := range []string{"repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(iso, " ", "-"), func(t *testing.T) { inlinedUnderDBASettings(t, iso) })
	}
}

func inlinedUnderDBASettings(t *testing.T, iso string) {
	ctx := tctx(t, time.Minute)
	u := serverURL(t)
	raw := rawPool(t, u)
	const role, s, evil = "audit44_dba", "audit44_dba", "audit44_evil"
	auditRoles(t, u, role)
	execAll(t, raw, "DROP SCHEMA IF EXISTS "+s+" CASCADE", "DROP SCHEMA IF EXISTS "+evil+" CASCADE")
	t.Cleanup(func() {
		raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+evil+" CASCADE")
		raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s+" CASCADE")
	})
	// The schema, made by the superuser.
	su, _ := driverLocker(t, u, &Options{Schema: s})
	cycle(t, su, auditKey("audit44-dba-make"))
	execAll(t, raw, "CREATE SCHEMA "+evil, "GRANT USAGE ON SCHEMA "+evil+" TO "+role)
	for _, f := range []string{
		"row_held(k text) RETURNS boolean",
		"grant_row(k text, o text, t timestamptz, ttl bigint) RETURNS bigint",
		"next_token3(k text, t timestamptz) RETURNS bigint",
		"retry_ms3(k text, t timestamptz) RETURNS bigint",
		"fits(m bigint, lim bigint, n bigint, sh boolean, pm boolean) RETURNS boolean",
		"ceil(x numeric) RETURNS numeric",
		"ceil(x double precision) RETURNS double precision",
		"greatest(a bigint, b bigint) RETURNS bigint",
	} {
		execAll(t, raw, "CREATE FUNCTION "+evil+"."+f+" LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit44: hostile "+f+" ran'; END $$")
	}
	execAll(t, raw,
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "+evil+" TO "+role,
		"GRANT USAGE ON SCHEMA "+s+" TO "+role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+s+" TO "+role,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA "+s+" TO "+role,
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "+s+" TO "+role,
		"REVOKE CREATE ON SCHEMA public FROM "+role,
		"ALTER ROLE "+role+" SET search_path = "+evil+", "+s+", public, pg_catalog",
		"ALTER ROLE "+role+" SET default_transaction_isolation = '"+iso+"'",
		"ALTER ROLE "+role+" SET statement_timeout = '100ms'",
		"ALTER ROLE "+role+" SET idle_in_transaction_session_timeout = '200ms'",
		"ALTER ROLE "+role+" SET lock_timeout = '10ms'",
	)
	ru := asRole(t, u, role)
	// The trap bites a statement that resolves names by the role's path.
	var sum int64
	if err := rawPool(t, ru).QueryRow(ctx, "SELECT greatest(1::bigint, 2::bigint) + ceil(1.5::numeric)::bigint").Scan(&sum); err == nil {
		t.Fatalf("the role's search_path does not reach the hostile functions (%d)", sum)
	}
	key := auditKey("audit44-dba")
	x := newExcl44(t)
	var ls []*lock.Locker
	for range 3 {
		ls = append(ls, roleLocker(t, ru, &Options{Schema: s, NoCreate: true}))
	}
	wg := x.contend(ctx, ls, key, 15, 15*time.Second, "under the role's settings")
	// A TryLock of the role while the key is busy: held, or granted.
	l := roleLocker(t, ru, &Options{Schema: s, NoCreate: true})
	for range 20 {
		ls, err := l.TryLock(ctx, key, lock.WithTTL(10*time.Second))
		if err == nil {
			x.enter("trylock", int64(ls.Token()), ls.Done())
			x.exit("trylock")
			ls.Unlock(ctx)
		} else if !errors.Is(err, lock.ErrHeld) {
			t.Errorf("a TryLock under the role's settings: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	if n := x.grants.Load(); n < 45 {
		t.Errorf("%d grants, want at least 45", n)
	}
}
