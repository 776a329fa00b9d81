package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment settings a DBA may give a database or a role: the driver
// must keep its guarantees under each (its steps set what they rely on).

// envDB is a database of the shared server for this test alone, with
// settings (ALTER DATABASE ... SET), and its superuser URL.
func envDB(t *testing.T, name string, settings ...string) string {
	t.Helper()
	return testserver.SharedPostgres(t).CreateDatabase(t, name, settings...)
}

// lockWaits is how many sessions of database db wait for a lock.
func lockWaits(t testing.TB, raw *pgxpool.Pool, db string) int {
	t.Helper()
	var n int
	err := raw.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'", db).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEnv38RepeatableReadTwoHolders: with the database's default
// isolation at repeatable read, a TryLock that waited for the key's row
// behind a Lock's queueing step must still see the entry that step made.
// At repeatable read its snapshot was older than its wait: it found the
// holder expired, took the key, and the queued Lock was granted too.
//
// The steps are lined up on the key's row: a transaction holds it FOR
// SHARE while the Lock's step (W), a transaction of the test's (Y) and
// the TryLock's step (T) queue behind it, in that order. W runs while the
// holder's grant is live (W queues, its entry living three heartbeats);
// Y keeps the row until the grant has expired; then T runs, while W's
// entry lives.
func TestEnv38RepeatableReadTwoHolders(t *testing.T) {
	url := envDB(t, "env38_rr", "default_transaction_isolation=repeatable read")
	raw := rawPool(t, url)
	ctx := tctx(t, 90*time.Second)
	h := newTestLocker(t, url, &lock.Options{DisableAutoRenew: true}, &netCut{})
	w := newTestLocker(t, url, nil, &netCut{})
	tr := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("env38-rr")
	held, err := h.Lock(ctx, key, lock.WithTTL(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var left time.Duration
	if err := raw.QueryRow(ctx, "SELECT expires - clock_timestamp() FROM dlock.keys WHERE key = $1 AND holder IS NOT NULL", key).Scan(&left); err != nil {
		t.Fatal(err)
	}
	expiry := time.Now().Add(left) // the holder's grant ends, by the server's clock
	rtx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback(ctx)
	if _, err := rtx.Exec(ctx, "SELECT 1 FROM dlock.keys WHERE key = $1 FOR SHARE", key); err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lock.Lease
		err error
	}
	wres := make(chan result, 1)
	go func() {
		l, err := w.Lock(ctx, key, lock.WithTTL(30*time.Second))
		wres <- result{l, err}
	}()
	waitFor(t, "the Lock's step waiting for the key's row", 10*time.Second, func() bool { return lockWaits(t, raw, "env38_rr") == 1 })
	ytx := make(chan pgx.Tx, 1)
	go func() {
		tx, err := raw.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err == nil {
			_, err = tx.Exec(ctx, "SELECT 1 FROM dlock.keys WHERE key = $1 FOR UPDATE", key)
		}
		if err != nil {
			t.Errorf("the test's transaction: %v", err)
		}
		ytx <- tx
	}()
	waitFor(t, "the test's transaction waiting for the key's row", 10*time.Second, func() bool { return lockWaits(t, raw, "env38_rr") == 2 })
	tres := make(chan error, 1)
	var tl *lock.Lease
	go func() {
		var err error
		tl, err = tr.TryLock(ctx, key, lock.WithTTL(30*time.Second))
		tres <- err
	}()
	waitFor(t, "the TryLock's step waiting for the key's row", 10*time.Second, func() bool { return lockWaits(t, raw, "env38_rr") == 3 })
	// W's entry lives 3 s after its step, and its next steps wait behind
	// Y: W steps 1.2 s before the grant's end, T 0.3 s after it.
	if time.Until(expiry) < 1500*time.Millisecond {
		t.Fatalf("the steps were lined up too late (%v before the holder's expiry): the check needs a live grant at the Lock's step", time.Until(expiry))
	}
	time.Sleep(time.Until(expiry) - 1200*time.Millisecond)
	if err := rtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	y := <-ytx // the Lock's step has run: it queued behind the live grant
	if y == nil {
		t.FailNow()
	}
	if time.Until(expiry) < 0 {
		t.Fatalf("the Lock's step ran %v after the holder's expiry", -time.Until(expiry))
	}
	time.Sleep(time.Until(expiry) + 300*time.Millisecond)
	if err := y.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-tres
	if err == nil {
		defer tl.Unlock(ctx)
		select {
		case r := <-wres:
			if r.err == nil {
				defer r.l.Unlock(ctx)
				t.Fatalf("two exclusive holders: the TryLock (token %d) and the Lock queued before it (token %d)", tl.Token(), r.l.Token())
			}
			t.Fatalf("the TryLock was granted with a Lock queued before it (token %d); the Lock then failed: %v", tl.Token(), r.err)
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("the TryLock was granted with a Lock queued before it (token %d)", tl.Token())
	}
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("the TryLock: %v, want ErrHeld (a Lock is queued before it)", err)
	}
	select {
	case r := <-wres:
		if r.err != nil {
			t.Fatalf("the queued Lock: %v", r.err)
		}
		r.l.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the queued Lock was not granted 20 s after the holder's grant expired")
	}
	held.Unlock(ctx)
}

// TestEnv38DefaultIsolation: whatever isolation level the database or
// the role defaults to, and through a transaction pooler too, every call
// works (at serializable, a step failed with SQLSTATE 40001), and so
// under default_transaction_read_only; a step called by hand at another
// level than read committed is refused.
func TestEnv38DefaultIsolation(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	ser := envDB(t, "env38_ser", "default_transaction_isolation=serializable")
	envDB(t, "env38_rrrole")
	ro := envDB(t, "env38_ro", "default_transaction_read_only=on")
	if _, err := pg.Exec("DROP ROLE IF EXISTS env38_rr_role; CREATE ROLE env38_rr_role LOGIN PASSWORD 'pw' SUPERUSER;" +
		" ALTER ROLE env38_rr_role SET default_transaction_isolation = 'repeatable read';"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Exec("DROP ROLE IF EXISTS env38_rr_role") })
	b := testserver.StartPgBouncer(t, pg, "transaction")
	for _, tc := range []struct {
		name, url string
		opts      Options
	}{
		{"DatabaseSerializable", ser, Options{}},
		{"RoleRepeatableRead", testserver.DatabaseURL(pg.URLFor("env38_rr_role", "pw"), "env38_rrrole"), Options{}},
		{"PgBouncerSerializable", testserver.DatabaseURL(b.URL(), "env38_ser"), Options{TransactionPooling: true}},
		{"DatabaseReadOnly", ro, Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			contend(t, tc.url, tc.opts)
		})
	}
	t.Run("HandCallRefused", func(t *testing.T) {
		raw := rawPool(t, ser)
		ctx := tctx(t, 30*time.Second)
		var tok int64
		err := pgx.BeginTxFunc(ctx, raw, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT tok FROM dlock.acquire3('env38-hand', 'o', 0, 0, 1000000, false, false, 3000000, '')").Scan(&tok)
		})
		if err == nil || !strings.Contains(err.Error(), "read committed") {
			t.Fatalf("acquire called at repeatable read: token %d, %v; want a refusal naming read committed", tok, err)
		}
		t.Logf("refused: %v", err)
	})
}

// contend makes every kind of call through a Locker of url, with
// several Lockers contending for one key: none may fail.
func contend(t *testing.T, url string, o Options) {
	ctx := tctx(t, 60*time.Second)
	key := auditKey("env38-iso")
	first := newLockerWith(t, url, &o, &netCut{})
	l, err := first.TryLock(ctx, key+"/fresh")
	if err != nil {
		t.Fatalf("TryLock of a key no one uses: %v", err)
	}
	if err := l.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	holders := 0
	for i := range 4 {
		lk := newLockerWith(t, url, &o, &netCut{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				var l *lock.Lease
				var err error
				if (i+j)%3 == 0 {
					l, err = lk.TryLock(ctx, key)
					if errors.Is(err, lock.ErrHeld) {
						continue
					}
				} else {
					l, err = lk.Lock(ctx, key)
				}
				if err != nil {
					t.Errorf("Locker %d, call %d: %v", i, j, err)
					return
				}
				mu.Lock()
				holders++
				if holders > 1 {
					t.Errorf("two holders of %s", key)
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				holders--
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Locker %d, Unlock %d: %v", i, j, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestEnv38HoldsGrantRepeatableRead: holds_grant in a user's transaction
// at repeatable read, whose snapshot predates the key's handover (the
// holder released, another client was granted), does not say true: the
// new grant updated the key's row, and locking that row FOR KEY SHARE
// then fails the transaction (40001).
func TestEnv38HoldsGrantRepeatableRead(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	a := newTestLocker(t, url, nil, &netCut{})
	b := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("env38-holds-rr")
	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := raw.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM dlock.keys WHERE key = $1 AND holder IS NOT NULL", key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the snapshot: %d entries, %v", n, err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(ctx)
	var ok bool
	err = tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(la.Token())).Scan(&ok)
	if err == nil && ok {
		t.Fatalf("holds_grant said true for a released grant (token %d) while the key is granted to another (token %d)", la.Token(), lb.Token())
	}
	t.Logf("holds_grant in a repeatable read transaction: %v, %v", ok, err)
}
