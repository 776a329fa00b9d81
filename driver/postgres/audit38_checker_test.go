package postgres

import (
	"context"
	"testing"
	"time"
)

// TestAudit38CheckerRole: the least a role needs to check leases in its
// own transactions. holds_grant runs with its caller's rights and takes
// the key's row FOR KEY SHARE, which PostgreSQL allows only with an UPDATE
// right on the table: SELECT on keys and entries is refused (fail
// closed: no answer, never a wrong one), and with UPDATE on keys' key
// column alone it answers right, while it still cannot move a counter,
// touch an entry, or run a step.
func TestAudit38CheckerRole(t *testing.T) {
	u := serverURL(t)
	raw := rawPool(t, u)
	ctx := tctx(t, 60*time.Second)
	drop := func() {
		raw.Exec(context.Background(), "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'audit38_checker') THEN EXECUTE 'DROP OWNED BY audit38_checker'; EXECUTE 'DROP ROLE audit38_checker'; END IF; END $$")
	}
	drop()
	t.Cleanup(drop)
	l := newTestLocker(t, u, nil, &netCut{})
	ls, err := l.TryLock(ctx, auditKey("audit38-checker")) // makes the schema too
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Unlock(ctx)
	execAll(t, raw,
		"CREATE ROLE audit38_checker LOGIN PASSWORD '"+rolePassword+"'",
		"GRANT USAGE ON SCHEMA dlock TO audit38_checker",
		"GRANT SELECT ON dlock.keys, dlock.entries TO audit38_checker",
	)
	c := rawPool(t, asRole(t, u, "audit38_checker"))
	check := func(tok int64) (bool, error) {
		var ok bool
		err := c.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", ls.Key(), tok).Scan(&ok)
		return ok, err
	}
	if ok, err := check(int64(ls.Token())); err == nil || ok {
		t.Errorf("holds_grant of a role with SELECT only: %v, %v; want a refusal", ok, err)
	}
	execAll(t, raw, "GRANT UPDATE (key) ON dlock.keys TO audit38_checker")
	if ok, err := check(int64(ls.Token())); err != nil || !ok {
		t.Errorf("holds_grant of the live lease by a role with UPDATE (key) on keys: %v, %v; want true", ok, err)
	}
	if ok, err := check(int64(ls.Token()) - 1); err != nil || ok {
		t.Errorf("holds_grant of another token: %v, %v; want false", ok, err)
	}
	for _, q := range []string{
		"UPDATE dlock.keys SET counter = 9223372036854775807",
		"UPDATE dlock.keys SET holder = NULL",
		"UPDATE dlock.entries SET expires = clock_timestamp()",
		"DELETE FROM dlock.entries",
		"SELECT * FROM dlock.acquire3('audit38-checker-k', 'ffffffffffffffffffffffffffffffff', 0, 0, 60000000, false, false, 3000000, '')",
	} {
		if _, err := c.Exec(ctx, q); err == nil {
			t.Errorf("%s: the checking role ran it", q)
		}
	}
	if err := ls.Refresh(ctx, 10*time.Second); err != nil {
		t.Errorf("Refresh after the checker's attempts: %v", err)
	}
}
