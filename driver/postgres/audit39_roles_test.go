package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
)

// auditRoles makes login roles (password rolePassword) and drops them,
// with what they own, at cleanup.
func auditRoles(t *testing.T, url string, roles ...string) {
	t.Helper()
	raw := rawPool(t, url)
	drop := func() {
		for _, r := range roles {
			raw.Exec(context.Background(), "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '"+r+"') THEN EXECUTE 'DROP OWNED BY "+r+"'; EXECUTE 'DROP ROLE "+r+"'; END IF; END $$")
		}
	}
	drop()
	t.Cleanup(drop)
	for _, r := range roles {
		execAll(t, raw, "CREATE ROLE "+r+" LOGIN PASSWORD '"+rolePassword+"'")
	}
}

// TestAudit39ForgedNotifyOwnChannel: a role that may only connect reads
// nothing of dlock's, but a waiter's channel and owner token leak (a
// log, pg_stat_activity of a superuser). It NOTIFYs the waiter's own
// channel (schema version 3's per-Locker channel) with the waiter's
// owner 300 times: the waiter wakes and asks the server, and stays
// waiting while the key is held; it is granted once the holder unlocks.
func TestAudit39ForgedNotifyOwnChannel(t *testing.T) {
	u := serverURL(t)
	raw := rawPool(t, u)
	ctx := tctx(t, time.Minute)
	auditRoles(t, u, "audit39_notify")
	a := newTestLocker(t, u, nil, &netCut{})
	b := newTestLocker(t, u, nil, &netCut{})
	key := auditKey("audit39-notify")
	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lease, 1)
	bdone := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, key)
		got <- l
		bdone <- err
	}()
	var owner, ch string
	waitFor(t, "b's queue entry", 3*time.Second, func() bool {
		return raw.QueryRow(ctx, "SELECT owner, chan FROM dlock.entries WHERE key = $1 AND NOT granted", key).Scan(&owner, &ch) == nil
	})
	if ch == "" || ch == "dlock" {
		t.Fatalf("the waiter's channel %q: not a Locker's own", ch)
	}
	notify := rawPool(t, asRole(t, u, "audit39_notify"))
	if _, err := notify.Exec(ctx, "SELECT count(*) FROM dlock.entries"); err == nil {
		t.Fatal("the notifying role can read dlock's tables: the test would prove nothing")
	}
	for range 300 {
		if _, err := notify.Exec(ctx, "SELECT pg_notify($1, $2)", ch, owner); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case l := <-got:
		t.Fatalf("a forged notification granted a held key: b's Lock returned %v (token %d) while a holds token %d", <-bdone, l.Token(), la.Token())
	case <-time.After(500 * time.Millisecond):
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if err := <-bdone; err != nil {
			t.Fatalf("b's Lock after a's Unlock: %v", err)
		}
		if l.Token() <= la.Token() {
			t.Errorf("b's token %d after a's %d", l.Token(), la.Token())
		}
		l.Unlock(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("b still waits 3 s after the key was freed")
	}
}

// TestAudit39ExecuteOnlyRole: a role with USAGE on the schema and
// EXECUTE on its functions (PUBLIC's default) but no right on its
// tables is refused by every function of version 3, fast paths
// included: none runs with its owner's rights.
func TestAudit39ExecuteOnlyRole(t *testing.T) {
	u := serverURL(t)
	raw := rawPool(t, u)
	ctx := tctx(t, time.Minute)
	auditRoles(t, u, "audit39_exec")
	a := newTestLocker(t, u, nil, &netCut{})
	key := auditKey("audit39-exec")
	la, err := a.Lock(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	execAll(t, raw, "GRANT USAGE ON SCHEMA dlock TO audit39_exec")
	var holder string
	if err := raw.QueryRow(ctx, "SELECT holder FROM dlock.keys WHERE key = $1", key).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	exec := rawPool(t, asRole(t, u, "audit39_exec"))
	o := strings.Repeat("f", 32)
	tok := int64(la.Token())
	for _, q := range []string{
		"SELECT * FROM dlock.lock3($1, '" + o + "', 60000000, false, 3000000, '')",
		"SELECT dlock.unlock3($1, '" + holder + "', 1000)",
		"SELECT dlock.release3($1, '" + holder + "', false, 1000, false)",
		"SELECT * FROM dlock.acquire3($1, '" + o + "', 0, 0, 60000000, false, false, 3000000, '')",
		"SELECT * FROM dlock.check_turn3($1, '" + o + "', 0, 0, 60000000, 3000000, '')",
		"SELECT dlock.grant_row($1, '" + o + "', clock_timestamp(), 60000000)",
		"SELECT dlock.begin_key3($1)",
		"SELECT dlock.wake3($1)",
		"SELECT dlock.next_token($1, clock_timestamp())",
		"SELECT dlock.refresh3(ARRAY[$1], ARRAY['" + holder + "'], 1)",
		"SELECT dlock.resume3($1, '" + holder + "', 0, 0, " + itoa(tok) + ", false, 1)",
		"SELECT dlock.sweep3(1000, 0)",
		"SELECT dlock.holds_grant($1, " + itoa(tok) + ")",
	} {
		err := pgx.BeginTxFunc(ctx, exec, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, strings.ReplaceAll(q, "$1", "'"+key+"'"))
			return err
		})
		if err == nil {
			t.Errorf("%s: an EXECUTE-only role ran it", q)
		} else if !refused(err) {
			t.Logf("%s: %v (not insufficient_privilege)", q, err)
		}
	}
	var h2 string
	var tok2 int64
	if err := raw.QueryRow(ctx, "SELECT holder, token FROM dlock.keys WHERE key = $1", key).Scan(&h2, &tok2); err != nil || h2 != holder || tok2 != tok {
		t.Fatalf("the row's grant after the role's calls: %s %d, %v; want %s %d", h2, tok2, err, holder, tok)
	}
	if err := la.Refresh(ctx, 30*time.Second); err != nil {
		t.Fatalf("the holder's Refresh: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestAudit39FastPathRefusesOtherIsolation: lock3 and unlock3 called by
// hand (or by a client that does not begin its steps at read committed)
// in a repeatable read or serializable transaction fail instead of
// judging the row by an old snapshot.
func TestAudit39FastPathRefusesOtherIsolation(t *testing.T) {
	u := serverURL(t)
	raw := rawPool(t, u)
	ctx := tctx(t, time.Minute)
	a := newTestLocker(t, u, nil, &netCut{})
	key := auditKey("audit39-iso")
	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	var holder string
	if err := raw.QueryRow(ctx, "SELECT holder FROM dlock.keys WHERE key = $1", key).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, q := range []string{
			"SELECT tok FROM dlock.lock3($1, '" + strings.Repeat("e", 32) + "', 60000000, false, 3000000, '')",
			"SELECT tok FROM dlock.lock3($1 || '-free', '" + strings.Repeat("e", 32) + "', 60000000, false, 3000000, '')",
			"SELECT dlock.unlock3($1, '" + holder + "', 1000)::int::bigint",
		} {
			var v int64
			err := pgx.BeginTxFunc(ctx, raw, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, q, key).Scan(&v)
			})
			if err == nil || !strings.Contains(err.Error(), "read committed") {
				t.Errorf("%s at %s: %d, %v; want a refusal naming read committed", q, iso, v, err)
			}
		}
	}
	if err := la.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("the holder's lease after the refused calls: %v", err)
	}
}

// TestAudit39HoldsGrantAcrossGrants: holds_grant for one key through
// its kinds of grant: the fast path's grant in the row (true; false
// once unlocked, by unlock3's fast path; false once expired, before any
// step clears it), a queued waiter's grant in the row by check_turn3
// (true; the previous holder's token false), shared grants in entries
// (true), a non-holder's release (changes nothing), and tokens rising
// through all of them.
func TestAudit39HoldsGrantAcrossGrants(t *testing.T) {
	u := envDB(t, "audit39_holds")
	raw := rawPool(t, u)
	ctx := tctx(t, time.Minute)
	a := newTestLocker(t, u, nil, &netCut{})
	b := newTestLocker(t, u, nil, &netCut{})
	key := auditKey("audit39-holds")
	holds := func(tok uint64) bool {
		t.Helper()
		var ok bool
		if err := raw.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(tok)).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	var toks []uint64
	l1, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	toks = append(toks, l1.Token())
	if !holds(l1.Token()) {
		t.Fatal("holds_grant false for the fast path's live grant")
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if holds(l1.Token()) {
		t.Fatal("holds_grant true after unlock3's fast path")
	}
	l2, err := a.Lock(ctx, key, lock.WithTTL(300*time.Millisecond), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	toks = append(toks, l2.Token())
	<-l2.Done()
	time.Sleep(50 * time.Millisecond)
	if holds(l2.Token()) {
		t.Fatal("holds_grant true for an expired grant in the row")
	}
	l3, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	toks = append(toks, l3.Token())
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "b's queue entry", 3*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	// A release by a Locker that does not hold the grant, with a waiter
	// behind it (unlock3 falls back to release3).
	stranger := rowLease(key, 9, time.Second)
	bd := rowDriver(t, u)
	if err := bd.Release(ctx, stranger); err == nil {
		t.Fatal("a stranger's release succeeded")
	}
	if !holds(l3.Token()) {
		t.Fatalf("holds_grant false for the holder after a stranger's release: %q", entriesOf(t, raw, "dlock", key))
	}
	select {
	case l := <-got:
		t.Fatalf("the waiter was granted (token %d) after a stranger's release, while token %d is held", l.Token(), l3.Token())
	case <-time.After(300 * time.Millisecond):
	}
	if err := l3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l4 := <-got
	toks = append(toks, l4.Token())
	if !holds(l4.Token()) || holds(l3.Token()) {
		t.Fatalf("holds_grant after the hand-over to the waiter: new %v, old %v", holds(l4.Token()), holds(l3.Token()))
	}
	var row *string
	raw.QueryRow(ctx, "SELECT holder FROM dlock.keys WHERE key = $1", key).Scan(&row)
	if row == nil {
		t.Errorf("the queued waiter's exclusive grant is not in the row: %q", entriesOf(t, raw, "dlock", key))
	}
	if err := l4.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := a.RLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.RLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	toks = append(toks, r1.Token(), r2.Token())
	if !holds(r1.Token()) || !holds(r2.Token()) {
		t.Fatal("holds_grant false for live shared grants")
	}
	if _, err := a.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock over shared grants: %v", err)
	}
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	l5, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	toks = append(toks, l5.Token())
	l5.Unlock(ctx)
	for i := 1; i < len(toks); i++ {
		if toks[i] <= toks[i-1] {
			t.Errorf("tokens %v: not rising at %d", toks, i)
		}
	}
}
