package postgres

import (
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
	url := envDB(t, "audit38_searchpath")
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	execAll(t, raw,
		// Not through envDB: it would quote the list as one name.
		"ALTER DATABASE audit38_searchpath SET search_path = audit38sp, pg_catalog",
		"CREATE SCHEMA audit38sp",
		`CREATE FUNCTION audit38sp.set_config(text, text, boolean) RETURNS text LANGUAGE plpgsql AS $$
		BEGIN
			IF pg_catalog.to_regclass('dlock.entries') IS NOT NULL THEN
				EXECUTE 'DELETE FROM dlock.entries';
			END IF;
			RETURN pg_catalog.set_config($1, $2, $3);
		END $$`,
	)
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
	other, err := b.TryLock(ctx, victim)
	if err == nil {
		defer other.Unlock(ctx)
		t.Fatalf("two holders of %q: tokens %d and %d (a set_config of the search path's ran in the step)", victim, held.Token(), other.Token())
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v, want ErrNotAcquired", err)
	}
}
