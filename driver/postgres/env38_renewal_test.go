package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestEnv38HoldsGrantKeepsRenewals: a user's transaction that checked
// one key with holds_grant (its row FOR KEY SHARE) for twice the TTL costs
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

// TestEnv38HoldsGrantKeepsBatchRenewal: one RefreshBatch of two keys
// returns at once, renewing both, while a user's transaction that
// checked one of them is open. It waited for that transaction, so the
// other key's renewal failed with the call's context.
func TestEnv38HoldsGrantKeepsBatchRenewal(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := newDriver(pool, nil, true)
	defer d.Close()
	prefix := auditKey("env38-batch")
	var ls []*driver.Lease
	for _, k := range []string{"a", "b"} {
		l := &driver.Lease{Key: prefix + "/" + k, Owner: auditKey("owner"), Mode: driver.Exclusive, TTL: 10 * time.Second}
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", ls[0].Key, int64(ls[0].Token)).Scan(&ok); err != nil || !ok {
		t.Fatalf("holds_grant: %v, %v; want true", ok, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, errs := d.RefreshBatch(rctx, ls, 10*time.Second)
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Errorf("renewal of %s, with a transaction that checked %s open: %v (after %v)", ls[i].Key, ls[0].Key, err, took)
		}
	}
}
