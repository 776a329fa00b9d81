package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
)

// TestAudit44PGPgBouncerLeakedSettings: through PgBouncer in
// transaction mode, another client leaves session settings on the server
// connections it is lent (serializable, statement_timeout 100 ms,
// idle_in_transaction_session_timeout 200 ms, a search_path whose first
// schema holds hostile functions named like the helpers version 8 writes
// out). dlock's steps then run on those connections: three Lockers
// (TransactionPooling) contend with Lock on one key; no step fails, no
// hostile function runs, grants do not overlap and tokens rise.
func TestAudit44PGPgBouncerLeakedSettings(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	ctx := tctx(t, time.Minute)
	raw := rawPool(t, pg.URL())
	const s, evil = "audit44_pgb", "audit44_pgb_evil"
	execAll(t, raw, "DROP SCHEMA IF EXISTS "+s+" CASCADE", "DROP SCHEMA IF EXISTS "+evil+" CASCADE", "CREATE SCHEMA "+evil)
	t.Cleanup(func() {
		raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+evil+" CASCADE")
		raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s+" CASCADE")
	})
	for _, f := range []string{
		"row_held(k text) RETURNS boolean",
		"grant_row(k text, o text, t timestamptz, ttl bigint) RETURNS bigint",
		"next_token3(k text, t timestamptz) RETURNS bigint",
		"retry_ms3(k text, t timestamptz) RETURNS bigint",
		"fits(m bigint, lim bigint, n bigint, sh boolean, pm boolean) RETURNS boolean",
		"ceil(x numeric) RETURNS numeric",
	} {
		execAll(t, raw, "CREATE FUNCTION "+evil+"."+f+" LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit44: hostile "+f+" ran'; END $$")
	}
	// The polluter: session SETs, each its own transaction, on as many
	// server connections as it is lent.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	polluter := rawPool(t, b.URL())
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, q := range []string{
				"SET search_path = " + evil + ", " + s + ", public, pg_catalog",
				"SET default_transaction_isolation = 'serializable'",
				"SET statement_timeout = '100ms'",
				"SET idle_in_transaction_session_timeout = '200ms'",
			} {
				polluter.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	key := auditKey("audit44-pgb")
	x := newExcl44(t)
	var ls []*lock.Locker
	for range 3 {
		ls = append(ls, newLockerWith(t, b.URL(), &Options{Schema: s, TransactionPooling: true}, &netCut{}))
	}
	lwg := x.contend(ctx, ls, key, 6, 20*time.Second, "through PgBouncer")
	lwg.Wait()
	close(stop)
	wg.Wait()
	if n := x.grants.Load(); n != 18 {
		t.Errorf("%d grants, want 18", n)
	}
	// The settings did leak: a connection PgBouncer lends has them.
	var iso string
	if err := rawPool(t, b.URL()).QueryRow(ctx, "SHOW default_transaction_isolation", pgx.QueryExecModeSimpleProtocol).Scan(&iso); err != nil || iso != "serializable" {
		t.Errorf("a server connection through PgBouncer: default_transaction_isolation %q, %v; the polluter's SET did not leak", iso, err)
	}
}
