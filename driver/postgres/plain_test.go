package postgres

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaV8 is schema.sql of version 8: no keys.n, no triggers; lock3's
// fast path read entries and voids.
//
//go:embed testdata/schema_v8.sql
var schemaV8 string

// counted fails t unless key's n is its entries and tombstones.
func counted(t *testing.T, raw *pgxpool.Pool, s, key string) int64 {
	t.Helper()
	var n *int64
	var want int64
	err := raw.QueryRow(context.Background(), "SELECT x.n, (SELECT count(*) FROM "+s+".entries e WHERE e.key = x.key)"+
		" + (SELECT count(*) FROM "+s+".voids v WHERE v.key = x.key) FROM "+s+".keys x WHERE x.key = $1", key).Scan(&n, &want)
	if err != nil {
		t.Fatalf("reading n of %s: %v", key, err)
	}
	if n == nil {
		t.Fatalf("n of %s is NULL, want %d (its entries and tombstones)", key, want)
	}
	if *n != want {
		t.Fatalf("n of %s is %d, want %d (its entries and tombstones)", key, *n, want)
	}
	return want
}

// sharedGrant is a shared grant of owner at key by acquire3 (as any
// client's RLock sends it), in tx when it is not nil.
func sharedGrant(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, s, key, owner string) int64 {
	t.Helper()
	var tok, retry, lim int64
	var voided bool
	err := q.QueryRow(context.Background(), "SELECT tok, retry, other_lim, voided FROM "+s+".acquire3($1, $2, 1, 0, $3, false, false, $4, '')",
		key, owner, int64(30_000_000), int64(60_000_000)).Scan(&tok, &retry, &lim, &voided)
	if err != nil {
		t.Fatalf("a shared acquire3: %v", err)
	}
	return tok
}

// TestPlainLockWaitsForTheRow: the plain Lock (an UPDATE of the key's
// row) that waits for the row's lock while another step adds a shared
// grant to the key's entries is refused once that step commits: it
// judges the row's n as the step left it. A plain statement that read
// entries in a subquery (version 8's lock3 fast path, as a plain
// statement) or did not read n at all would grant the key there, a
// second holder beside the shared one.
func TestPlainLockWaitsForTheRow(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "plain_wait"
	l, d := driverLocker(t, url, &Options{Schema: schema})
	key := auditKey("plain-wait")
	cycle(t, l, key) // the key's row, n counted
	plain := d.plainRuns.Load()
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The step: it locks the row (begin_key3), then the plain Lock is
	// sent and waits for it, then it inserts the shared grant and commits.
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+schema+".keys WHERE key = $1 FOR UPDATE", key); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ls  *lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ls, err := l.TryLock(ctx, key)
		got <- result{ls, err}
	}()
	waitFor(t, "the plain Lock waiting for the row", 20*time.Second, func() bool {
		var n int
		raw.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH r AS%UPDATE "+schema+".keys x SET counter%'").Scan(&n)
		return n == 1
	})
	if tok := sharedGrant(t, tx, schema, key, strings.Repeat("s", 32)); tok == 0 {
		t.Fatal("the shared grant")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err == nil {
		r.ls.Unlock(ctx)
		t.Fatalf("an exclusive TryLock was granted (token %d) while a shared grant holds the key: two holders", r.ls.Token())
	}
	if !errors.Is(r.err, lock.ErrHeld) {
		t.Fatalf("TryLock: %v, want ErrHeld", r.err)
	}
	if d.plainRuns.Load() != plain {
		t.Error("a plain step counted as run")
	}
	counted(t, raw, schema, key)
}

// TestKeysCountEntries: keys.n follows every writer of entries and
// voids, the steps and an operator's DELETE and TRUNCATE, and a row made
// again beside live entries (an operator deleted it) counts them: the
// plain Lock is never granted beside an entry.
func TestKeysCountEntries(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "count_n"
	l, d := driverLocker(t, url, &Options{Schema: schema})
	key := auditKey("count")
	cycle(t, l, key)
	if n := counted(t, raw, schema, key); n != 0 {
		t.Fatalf("n %d after a cycle", n)
	}
	if sharedGrant(t, raw, schema, key, strings.Repeat("a", 32)) == 0 || sharedGrant(t, raw, schema, key, strings.Repeat("b", 32)) == 0 {
		t.Fatal("the shared grants")
	}
	before := counted(t, raw, schema, key)
	if _, err := l.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock beside shared grants: %v, want ErrHeld", err)
	}
	// An operator deletes the key's row, not its entries: the row made
	// again (lock3) counts them.
	if _, err := raw.Exec(ctx, "DELETE FROM "+schema+".keys WHERE key = $1", key); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock beside shared grants, the key's row deleted: %v, want ErrHeld", err)
	}
	counted(t, raw, schema, key)
	if _, err := l.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock beside shared grants, the row made again: %v, want ErrHeld", err)
	}
	// An entry of a key without its row is refused.
	orphan := auditKey("count-orphan")
	_, err := raw.Exec(ctx, "INSERT INTO "+schema+".entries (key, owner, mode, expires, joined) VALUES ($1, 'o', 1, now() + interval '1 minute', now())", orphan)
	if err == nil || !strings.Contains(err.Error(), "has no row in") {
		t.Fatalf("an entry without its key's row: %v, want refused", err)
	}
	// An operator's DELETE counts; a release's tombstone counts.
	if _, err := raw.Exec(ctx, "DELETE FROM "+schema+".entries WHERE key = $1 AND owner = $2", key, strings.Repeat("a", 32)); err != nil {
		t.Fatal(err)
	}
	if n := counted(t, raw, schema, key); n != before-1 {
		t.Fatalf("n %d after a DELETE, want %d", n, before-1)
	}
	var ok bool
	if err := raw.QueryRow(ctx, "SELECT "+schema+".release3($1, $2, false, 1000000, false)", key, strings.Repeat("b", 32)).Scan(&ok); err != nil || !ok {
		t.Fatalf("release3: %v, %v", ok, err)
	}
	if err := raw.QueryRow(ctx, "SELECT "+schema+".release3($1, $2, false, 1000000, false)", key, strings.Repeat("b", 32)).Scan(&ok); err != nil || ok {
		t.Fatalf("release3 again: %v, %v", ok, err)
	}
	if n := counted(t, raw, schema, key); n != before-1 {
		t.Fatalf("n %d with the entry gone and a tombstone, want %d", n, before-1)
	}
	// TRUNCATE fires no row trigger: every n is forgotten, and counted
	// again by the next step on the key.
	if _, err := raw.Exec(ctx, "TRUNCATE "+schema+".voids"); err != nil {
		t.Fatal(err)
	}
	var unknown bool
	if err := raw.QueryRow(ctx, "SELECT n IS NULL FROM "+schema+".keys WHERE key = $1", key).Scan(&unknown); err != nil || !unknown {
		t.Fatalf("n unknown after TRUNCATE: %v, %v", unknown, err)
	}
	cycle(t, l, key)
	counted(t, raw, schema, key)
	plain := d.plainRuns.Load()
	cycle(t, l, key)
	if d.plainRuns.Load() != plain+2 {
		t.Errorf("%d plain steps in a cycle of a counted key, want 2", d.plainRuns.Load()-plain)
	}
}

// TestUpgradeFromV8: version 9 adds keys.n and its triggers, counting the
// entries and tombstones that version 8 clients left, in the install's
// transaction. A version 8 client's shared grant and queued waiter,
// made before the install, hold the key against the version 9 client's
// plain Lock; the version 8 client's steps after the install (which run
// version 9's functions, replaced in place) keep n, and once they are
// gone the version 9 client's plain steps take the key.
func TestUpgradeFromV8(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "upgrade_v8"
	if _, err := raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, strings.ReplaceAll(schemaV8, "{{schema}}", schema)); err != nil {
		t.Fatal(err)
	}
	key, other := auditKey("upgrade8"), auditKey("upgrade8-other")
	shared, waiter := strings.Repeat("8", 32), strings.Repeat("w", 32)
	if sharedGrant(t, raw, schema, key, shared) == 0 {
		t.Fatal("the version 8 shared grant")
	}
	if tok := v7Join(t, raw, schema, key, waiter); tok != 0 {
		t.Fatalf("a version 8 waiter was granted beside a shared grant (token %d)", tok)
	}
	if tok := v6Lock(t, raw, schema, other, strings.Repeat("x", 32)); tok == 0 {
		t.Fatal("the version 8 grant of the other key")
	}
	if !v6Unlock(t, raw, schema, other, strings.Repeat("x", 32)) {
		t.Fatal("the version 8 release of the other key")
	}
	l9, d9 := driverLocker(t, url, &Options{Schema: schema})
	if ls, err := l9.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		if ls != nil {
			ls.Unlock(ctx)
		}
		t.Fatalf("a version 9 TryLock of a key with a version 8 shared grant and waiter: %v, want ErrHeld", err)
	}
	var v int
	if err := raw.QueryRow(ctx, "SELECT "+schema+".version()").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("version() %d, %v; want %d", v, err, schemaVersion)
	}
	if n := counted(t, raw, schema, key); n != 2 {
		t.Fatalf("n %d: want the version 8 shared grant and waiter", n)
	}
	if n := counted(t, raw, schema, other); n != 0 {
		t.Fatalf("n %d of a free key", n)
	}
	// The free key's first version 9 cycle is plain.
	plain := d9.plainRuns.Load()
	cycle(t, l9, other)
	if d9.plainRuns.Load() != plain+2 {
		t.Errorf("%d plain steps on a free key counted by the install, want 2", d9.plainRuns.Load()-plain)
	}
	// The version 8 client goes on: its release of the shared grant and
	// its waiter's check (which grants it in the row).
	var ok bool
	if err := raw.QueryRow(ctx, "SELECT "+schema+".release3($1, $2, false, 30000000, false)", key, shared).Scan(&ok); err != nil || !ok {
		t.Fatalf("the version 8 release: %v, %v", ok, err)
	}
	counted(t, raw, schema, key)
	wtok := v7Check(t, raw, schema, key, waiter)
	if wtok == 0 {
		t.Fatal("the version 8 waiter's turn")
	}
	if n := counted(t, raw, schema, key); n != 0 {
		t.Fatalf("n %d once the waiter is granted in the row", n)
	}
	if ls, err := l9.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		if ls != nil {
			ls.Unlock(ctx)
		}
		t.Fatalf("a version 9 TryLock of a key a version 8 client holds: %v, want ErrHeld", err)
	}
	if !v6Unlock(t, raw, schema, key, waiter) {
		t.Fatal("the version 8 waiter's release found nothing")
	}
	plain = d9.plainRuns.Load()
	ls, err := l9.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ls.Token() <= uint64(wtok) {
		t.Errorf("the version 9 token %d, not above the version 8 waiter's %d", ls.Token(), wtok)
	}
	if tok := v6Lock(t, raw, schema, key, strings.Repeat("y", 32)); tok != 0 {
		t.Errorf("a version 8 client was granted a key a version 9 client holds (token %d)", tok)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if d9.plainRuns.Load() != plain+2 {
		t.Errorf("%d plain steps once the version 8 client's entries are gone, want 2", d9.plainRuns.Load()-plain)
	}
}
