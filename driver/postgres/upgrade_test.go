package postgres

import (
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
)

// schemaV2 is schema.sql of version 2, the last one that kept every grant
// in entries.
//
//go:embed testdata/schema_v2.sql
var schemaV2 string

// TestUpgradeFromV2: a client of version 2 holds a key (its grant in
// entries) when a client of version 3 installs its schema over it. The
// version 3 client must not be granted the key, and the version 2 client,
// which reads version() 3 and so installs nothing, must fail loudly on
// its next step instead of granting a key whose row holds a grant it
// cannot see.
func TestUpgradeFromV2(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "upgrade_v2"
	if _, err := raw.Exec(ctx, strings.ReplaceAll(schemaV2, "{{schema}}", schema)); err != nil {
		t.Fatal(err)
	}
	key := auditKey("upgrade")
	// The version 2 client's steps, as its driver sent them.
	v2 := func(call string, args ...any) (int64, error) {
		var tok int64
		err := pgx.BeginTxFunc(ctx, raw, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, call, args...).Scan(&tok)
		})
		return tok, err
	}
	const v2Acquire = "SELECT tok FROM " + schema + ".acquire($1, $2, 0, 0, 60000000, false, false, 3000000)"
	tok, err := v2(v2Acquire, key, strings.Repeat("a", 32))
	if err != nil || tok == 0 {
		t.Fatalf("the version 2 grant: token %d, %v", tok, err)
	}
	l3 := New(rawPool(t, url), &Options{Schema: schema})
	defer l3.Close()
	if ls, err := l3.TryLock(ctx, key); err == nil {
		ls.Unlock(ctx)
		t.Fatalf("a version 3 client was granted a key a version 2 client holds (token %d)", tok)
	} else if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("the version 3 TryLock: %v, want the key held", err)
	}
	other := auditKey("upgrade-other")
	held, err := l3.TryLock(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	if _, err := v2(v2Acquire, other, strings.Repeat("b", 32)); err == nil || !strings.Contains(err.Error(), "schema version 3 replaced") {
		t.Fatalf("a version 2 step on a version 3 schema: %v; want it to fail saying the schema was upgraded", err)
	}
	var ok bool
	if err := raw.QueryRow(ctx, "SELECT "+schema+".holds_grant($1, $2)", key, tok).Scan(&ok); err != nil || !ok {
		t.Fatalf("holds_grant of the version 2 grant after the upgrade: %v, %v", ok, err)
	}
	var v int
	if err := raw.QueryRow(ctx, "SELECT "+schema+".version()").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("version() %d, %v", v, err)
	}
}
