package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit38SearchPathSetConfig: schema.sql's functions run with
// search_path pg_catalog, but a step's own statements (the settings
// before the call, the literals' casts) are resolved in the session's
// search_path. pg_catalog is searched first only when the path does not
// name it: a database or role whose search_path names a schema before
// pg_catalog (here "audit38sp, pg_catalog") lets whoever may create in
// that schema define set_config(text, text, boolean), which the step
// then calls with the application's rights. Here it deletes every grant,
// and another client takes a key that is held. The step must name
// pg_catalog's objects.
func TestAudit38SearchPathSetConfig(t *testing.T) {
	searchPathAttack(t, "audit38_sp_setconfig", nil,
		`CREATE FUNCTION audit38sp.set_config(text, text, boolean) RETURNS text LANGUAGE plpgsql AS $$
		BEGIN
			IF pg_catalog.to_regclass('dlock.entries') IS NOT NULL THEN
				EXECUTE 'DELETE FROM dlock.entries';
			END IF;
			RETURN pg_catalog.set_config($1, $2, $3);
		END $$`,
	)
}

// TestAudit38SearchPathInspect: the same attack through Inspect's
// statement, which is not a step: an operator -(timestamptz,
// timestamptz) of a schema named before pg_catalog runs as it reads the
// key's entries.
func TestAudit38SearchPathInspect(t *testing.T) {
	inspect := func(ctx context.Context, l *lock.Locker, key string) {
		if _, err := l.Inspect(ctx, key); err != nil {
			t.Logf("Inspect: %v", err)
		}
	}
	searchPathAttack(t, "audit38_sp_inspect", inspect,
		`CREATE FUNCTION audit38sp.minus(timestamptz, timestamptz) RETURNS interval LANGUAGE plpgsql AS $$
		BEGIN
			EXECUTE 'DELETE FROM dlock.entries';
			RETURN pg_catalog.timestamptz_mi($1, $2);
		END $$`,
		"CREATE OPERATOR audit38sp.- (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = audit38sp.minus)",
	)
}

// searchPathAttack makes database db whose search_path is "audit38sp,
// pg_catalog", runs evil there, and checks that a key held by one
// client is not granted to another after between (if any) ran on it.
func searchPathAttack(t *testing.T, db string, between func(context.Context, *lock.Locker, string), evil ...string) {
	url := envDB(t, db)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	execAll(t, raw,
		// Not through envDB: it would quote the list as one name.
		"ALTER DATABASE "+db+" SET search_path = audit38sp, pg_catalog",
		"CREATE SCHEMA audit38sp",
	)
	execAll(t, raw, evil...)
	var path string
	if err := rawPool(t, url).QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil || path != "audit38sp, pg_catalog" {
		t.Fatalf("search_path of a new session: %q, %v", path, err)
	}
	a := newTestLocker(t, url, nil, &netCut{})
	b := newTestLocker(t, url, nil, &netCut{})
	victim := auditKey("audit38-sp")
	held, err := a.TryLock(ctx, victim, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	if between != nil {
		between(ctx, b, victim)
	}
	other, err := b.TryLock(ctx, victim)
	if err == nil {
		defer other.Unlock(ctx)
		t.Fatalf("two holders of %q: tokens %d and %d (an object of the search path's ran in a statement of the driver)", victim, held.Token(), other.Token())
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v, want ErrNotAcquired", err)
	}
}
