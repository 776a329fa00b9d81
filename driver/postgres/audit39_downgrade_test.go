package postgres

import (
	"context"
	_ "embed"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

//go:embed testdata/schema_v5.sql
var schemaV5 string

// TestAudit39FastStepOnVersion5: a Locker that read version 6 sends
// lock3, unlock3 and check_turn3 unwrapped, trusting step_settings in
// their bodies. When the schema is dropped and made again by a client of
// version 5 (an operator's reset during a rolling upgrade), the prepared
// statements are planned again against version 5's functions of the same
// names, which do not check, and nothing tells the Locker: its steps keep
// running unwrapped, here with the database's synchronous_commit off
// (version 5's bodies refuse another isolation level themselves, but not
// this), where TestEnv38SynchronousCommitOff loses grants in a crash.
func TestAudit39FastStepOnVersion5(t *testing.T) {
	db := "audit39_v5redo"
	url := envDB(t, db)
	ctx := tctx(t, time.Minute)
	l, d := driverLocker(t, url, &Options{Options: lock.Options{DisableAutoRenew: true}})
	cycle(t, l, auditKey("audit39-v5redo-a"))
	if d.fastRuns.Load() == 0 {
		t.Fatal("no fast step ran on version 6")
	}
	raw := rawConn(t, url)
	if _, err := raw.Exec(ctx, "DROP SCHEMA dlock CASCADE"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, strings.ReplaceAll(schemaV5, "{{schema}}", "dlock")); err != nil {
		t.Fatalf("the version 5 script: %v", err)
	}
	if _, err := raw.Exec(ctx, "ALTER DATABASE "+db+" SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	d.pool.Reset() // new sessions, at the database's new default
	before := d.fastRuns.Load()
	for i := range 3 {
		ctx := tctx(t, 30*time.Second)
		ls, err := l.TryLock(ctx, auditKey("audit39-v5redo-b"))
		if err == nil {
			err = ls.Unlock(ctx)
		}
		if err != nil {
			t.Logf("cycle %d: %v", i, err)
		}
	}
	var v int
	if err := raw.QueryRow(context.Background(), "SELECT dlock.version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if n := d.fastRuns.Load() - before; n > 0 {
		t.Errorf("%d steps ran unwrapped with synchronous_commit off on schema version %d, whose functions do not check the session", n, v)
	}
	if v != schemaVersion {
		t.Errorf("the Locker left the schema at version %d, want %d", v, schemaVersion)
	}
}
