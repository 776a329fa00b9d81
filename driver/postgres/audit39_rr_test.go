package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestAudit39HoldsGrantRRReleasedEntry: holds_grant in a user's
// repeatable read transaction whose snapshot predates the release of a
// shared grant (kept in entries). A release in the key's row updates the
// row, so the check's FOR KEY SHARE fails the transaction (40001); a
// release in entries only locks the row, so the check reads the deleted
// entry in its old snapshot and says true for a released grant. No
// other grant can have been made meanwhile (each updates the key's row),
// so no two holders write; the package doc says so (it said true "while
// that grant is live" at any isolation level). Kept as the record of it:
// it runs with DLOCK_AUDIT39_OPEN=1.
func TestAudit39HoldsGrantRRReleasedEntry(t *testing.T) {
	openAudit39(t, "holds_grant says true at repeatable read for a shared grant released after the snapshot")
	url := envDB(t, "audit39_rr")
	raw := rawPool(t, url)
	ctx := tctx(t, time.Minute)
	a := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("audit39-rr")
	r, err := a.RLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := raw.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM dlock.entries WHERE key = $1", key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the snapshot: %d entries, %v", n, err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var ok bool
	err = tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(r.Token())).Scan(&ok)
	t.Logf("holds_grant of the released shared grant at repeatable read: %v, %v", ok, err)
	if err == nil && ok {
		t.Fatalf("holds_grant said true for a released shared grant (token %d)", r.Token())
	}
}
