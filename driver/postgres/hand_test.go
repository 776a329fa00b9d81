package postgres

import (
	"context"
	neturl "net/url"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestHandOverGrantsInRelease: a release hands the key to its first
// exclusive waiter in the same transaction (hand3): right after the
// holder's Unlock, the key's row holds the waiter's grant, pending, with
// a higher token, even while the waiter cannot reach the server to
// confirm it. A waiter that never confirms loses it with its queue
// entry, and the next Lock gets the key; one that confirms gets its TTL.
func TestHandOverGrantsInRelease(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	h := newTestLocker(t, url, nil, &netCut{})
	cut := &netCut{}
	key := auditKey("hand-over")
	w := newTestLocker(t, withAppName(t, url, key), nil, cut)
	held, err := h.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.Lock(wctx, key)
	waitFor(t, "the waiter queued", 20*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	// Cut the waiter off at both ends: its sockets, and its server
	// sessions, so that no step of its already on the wire runs after the
	// release and confirms the grant.
	cut.setDown(true)
	terminateApp(t, raw, key)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var token int64
	var pending bool
	var life time.Duration
	err = raw.QueryRow(ctx, "SELECT coalesce(token, 0), coalesce(pending, false), coalesce(extract(epoch FROM expires - clock_timestamp()), 0) * interval '1 second'"+
		" FROM dlock.keys WHERE key = $1 AND holder IS NOT NULL", key).Scan(&token, &pending, &life)
	if err != nil || !pending || token <= int64(held.Token()) || life > entryLife {
		t.Fatalf("after the release: the row's grant token %d, pending %v, expires in %v (%v); want the waiter's, pending, token above %d, within %v",
			token, pending, life, err, held.Token(), entryLife)
	}
	// The waiter is cut off: the grant lapses with its entry, and the key
	// is free again.
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	defer lcancel()
	next, err := h.Lock(lctx, key)
	if err != nil {
		t.Fatalf("a Lock after an unconfirmed hand-over: %v; the key: %q", err, entriesOf(t, raw, "dlock", key))
	}
	if next.Token() <= uint64(token) {
		t.Errorf("the next grant's token %d, want above the handed one's %d", next.Token(), token)
	}
	next.Unlock(ctx)
}

// TestHandOverConfirmSetsTTL: the waiter's step confirms a handed grant
// and sets its expiry from the waiter's TTL, not its entry's life (three
// heartbeats, longer than this TTL).
func TestHandOverConfirmSetsTTL(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	h := newTestLocker(t, url, nil, &netCut{})
	w := newTestLocker(t, url, &lock.Options{TTL: 500 * time.Millisecond, DisableAutoRenew: true}, &netCut{})
	key := auditKey("hand-confirm")
	held, err := h.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := w.Lock(ctx, key)
		got <- err
	}()
	waitFor(t, "the waiter queued", 20*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	var pending bool
	var life time.Duration
	err = raw.QueryRow(ctx, "SELECT coalesce(pending, false), extract(epoch FROM expires - clock_timestamp()) * interval '1 second'"+
		" FROM dlock.keys WHERE key = $1 AND holder IS NOT NULL", key).Scan(&pending, &life)
	if err != nil || pending || life > 500*time.Millisecond {
		t.Fatalf("the confirmed grant: pending %v, expires in %v (%v); want confirmed, within its TTL of 500ms", pending, life, err)
	}
}

// withAppName is url with application_name set to name, so that a test
// can find the sessions of the Locker that dials it.
func withAppName(t *testing.T, raw, name string) string {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// terminateApp ends the server sessions named name and waits until they
// are gone: a statement that was sent before its client was cut off
// would otherwise still run.
func terminateApp(t *testing.T, raw *pgxpool.Pool, name string) {
	t.Helper()
	ctx := tctx(t, 30*time.Second)
	if _, err := raw.Exec(ctx, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = $1", name); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := raw.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&left); err != nil || left != 0 {
		t.Fatalf("sessions of %s left after their termination: %d (%v)", name, left, err)
	}
}
