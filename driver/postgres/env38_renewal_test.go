package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestEnv38HoldsGrantKeepsRenewals: a user's transaction that checked
// one key with holds_grant (its row FOR SHARE) for twice the TTL costs
// no lease its renewal: not the other keys renewed in the same batch,
// nor the checked key's own. Batched renewal took every key's row FOR
// UPDATE, so it waited for that transaction, and all the batch's leases
// were lost.
func TestEnv38HoldsGrantKeepsRenewals(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	const ttl = 1500 * time.Millisecond
	l := newTestLocker(t, url, &lock.Options{TTL: ttl}, &netCut{})
	prefix := auditKey("env38-renew")
	var leases []*lock.Lease
	for _, k := range []string{"a", "b", "c", "d"} {
		ls, err := l.TryLock(ctx, prefix+"/"+k)
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Unlock(context.Background())
		leases = append(leases, ls)
	}
	a := leases[0]
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", a.Key(), int64(a.Token())).Scan(&ok); err != nil || !ok {
		t.Fatalf("holds_grant: %v, %v; want true", ok, err)
	}
	time.Sleep(2 * ttl) // the guarded transaction runs on
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ls := range leases {
		select {
		case <-ls.Done():
			t.Errorf("lease of %s lost while a transaction checked %s: %v", ls.Key(), a.Key(), ls.Err())
		default:
		}
	}
	for _, ls := range leases {
		if err := ls.Refresh(ctx, ttl); err != nil {
			t.Errorf("Refresh of %s after the transaction: %v", ls.Key(), err)
		}
	}
}
