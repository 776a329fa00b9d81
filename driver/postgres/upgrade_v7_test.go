package postgres

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaV7 is schema.sql of version 7, whose functions called the SQL
// helpers (row_held, fits, grant_row, next_token3, retry_ms3) that
// version 8 writes out in their bodies.
//
//go:embed testdata/schema_v7.sql
var schemaV7 string

// v7Join is a version 7 client's queued first step (lock3 with q set,
// as its fast form sends it), and v7Check its waiter's step: the token
// granted, 0 when held. The entry lives a minute (a version 7 client
// passes 3 s and steps every second; the test steps it once).
func v7Join(t *testing.T, raw *pgxpool.Pool, s, key, owner string) int64 {
	t.Helper()
	var tok, retry, lim int64
	var voided bool
	err := raw.QueryRow(context.Background(), "SELECT tok, retry, other_lim, voided FROM "+s+".step_settings(), "+s+".lock3($1, $2, $3, $4, $5, $6)",
		key, owner, int64(30_000_000), true, int64(60_000_000), "").Scan(&tok, &retry, &lim, &voided)
	if err != nil {
		t.Fatalf("a version 7 queued lock3: %v", err)
	}
	return tok
}

func v7Check(t *testing.T, raw *pgxpool.Pool, s, key, owner string) int64 {
	t.Helper()
	var tok, retry, lim int64
	var voided bool
	err := raw.QueryRow(context.Background(), "SELECT tok, retry, other_lim, voided FROM "+s+".step_settings(), "+s+".check_turn3($1, $2, 0, 0, $3, $4, $5)",
		key, owner, int64(30_000_000), int64(60_000_000), "").Scan(&tok, &retry, &lim, &voided)
	if err != nil {
		t.Fatalf("a version 7 check_turn3: %v", err)
	}
	return tok
}

// TestUpgradeFromV7: version 8 changed no function's name, arguments,
// results or behaviour (it writes the SQL helpers out in the bodies), so
// version 7 and 8 clients share a key during an upgrade: a version 7
// holder and a version 7 waiter queued before the install, and a version
// 8 client that installs over them. The version 8 client is refused the
// key while either holds it, the version 7 release hands it to the
// version 7 waiter, whose version 7 check confirms it, and the version 8
// Lock queued behind them gets it last, with a higher token.
func TestUpgradeFromV7(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "upgrade_v7"
	if _, err := raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, strings.ReplaceAll(schemaV7, "{{schema}}", schema)); err != nil {
		t.Fatal(err)
	}
	key := auditKey("upgrade7")
	holder, waiter := strings.Repeat("7", 32), strings.Repeat("w", 32)
	tok := v7Join(t, raw, schema, key, holder)
	if tok == 0 {
		t.Fatal("the version 7 grant")
	}
	if got := v7Join(t, raw, schema, key, waiter); got != 0 {
		t.Fatalf("a version 7 waiter was granted a held key (token %d)", got)
	}
	l8, _ := driverLocker(t, url, &Options{Schema: schema})
	if ls, err := l8.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		if ls != nil {
			ls.Unlock(ctx)
		}
		t.Fatalf("a version 8 TryLock of a key a version 7 client holds: %v, want ErrHeld", err)
	}
	var v int
	if err := raw.QueryRow(ctx, "SELECT "+schema+".version()").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("version() %d, %v; want %d", v, err, schemaVersion)
	}
	type result struct {
		ls  *lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ls, err := l8.Lock(ctx, key)
		got <- result{ls, err}
	}()
	// The row's grant, the version 7 waiter and the version 8 one.
	waitFor(t, "the version 8 Lock queued", 20*time.Second, func() bool { return len(entriesOf(t, raw, schema, key)) == 3 })
	if !v6Unlock(t, raw, schema, key, holder) {
		t.Fatal("the version 7 release found nothing")
	}
	select {
	case r := <-got:
		t.Fatalf("the version 8 Lock behind a version 7 waiter returned first: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	wtok := v7Check(t, raw, schema, key, waiter)
	if wtok <= tok {
		t.Fatalf("the version 7 waiter's check after the version 7 release: token %d, want above %d", wtok, tok)
	}
	if !v6Unlock(t, raw, schema, key, waiter) {
		t.Fatal("the version 7 waiter's release found nothing")
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.ls.Token() <= uint64(wtok) {
		t.Errorf("the version 8 grant's token %d, not above the version 7 waiter's %d", r.ls.Token(), wtok)
	}
	if tok := v6Lock(t, raw, schema, key, strings.Repeat("x", 32)); tok != 0 {
		t.Errorf("a version 7 client was granted a key a version 8 client holds (token %d)", tok)
	}
	if err := r.ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
