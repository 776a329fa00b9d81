package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The grant in the key's row (schema version 3): each test drives the
// driver's steps straight, without lock's own bookkeeping.

// rowDriver is a driver over a pool of its own, closed at cleanup.
func rowDriver(t *testing.T, url string) *pgDriver {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := newDriver(pool, nil, true)
	t.Cleanup(func() { d.Close() })
	return d
}

func rowLease(key string, owner byte, ttl time.Duration) *driver.Lease {
	o := make([]byte, 32)
	for i := range o {
		o[i] = "0123456789abcdef"[(int(owner)+i)%16]
	}
	return &driver.Lease{Key: key, Owner: string(o), TTL: ttl}
}

func isHeld(err error) bool {
	var he *driver.HeldError
	return errors.As(err, &he)
}

// TestRowGrantHonoursExpiry: a live grant in the key's row refuses
// another attempt, by the fast path and by acquire3; once it expired,
// the next attempt is granted a higher token.
func TestRowGrantHonoursExpiry(t *testing.T) {
	ctx := tctx(t, time.Minute)
	d := rowDriver(t, serverURL(t))
	key := auditKey("row-expiry")
	a := rowLease(key, 1, 700*time.Millisecond)
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := rowLease(key, 2, 10*time.Second)
	if err := d.Acquire(ctx, b); !isHeld(err) {
		t.Fatalf("an attempt while the row's grant is live: %v, want held (token %d over %d)", err, b.Token, a.Token)
	}
	r := rowLease(key, 3, 10*time.Second)
	r.Reentry = true // acquire3's path
	if err := d.Acquire(ctx, r); !isHeld(err) {
		t.Fatalf("acquire3 while the row's grant is live: %v, want held", err)
	}
	time.Sleep(900 * time.Millisecond)
	if err := d.Acquire(ctx, b); err != nil {
		t.Fatalf("an attempt after the row's grant expired: %v", err)
	}
	if b.Token <= a.Token {
		t.Errorf("token %d after %d", b.Token, a.Token)
	}
}

// TestRowGrantKeepsFIFO: a waiter is queued while the key's row holds a
// grant; the grant expires; an attempt that comes after the waiter must
// not take the key (by the fast path's update of the free row), and the
// waiter's next check is granted.
func TestRowGrantKeepsFIFO(t *testing.T) {
	ctx := tctx(t, time.Minute)
	d := rowDriver(t, serverURL(t))
	key := auditKey("row-fifo")
	a := rowLease(key, 1, 500*time.Millisecond)
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	w := rowLease(key, 2, 10*time.Second)
	if err := d.Join(ctx, w, make(chan struct{}, 1)); !isHeld(err) {
		t.Fatalf("the waiter's Join: %v, want held", err)
	}
	time.Sleep(700 * time.Millisecond)
	c := rowLease(key, 3, 10*time.Second)
	if err := d.Acquire(ctx, c); !isHeld(err) {
		t.Fatalf("an attempt behind a queued waiter, the row's grant expired: %v, want held (it jumped the queue)", err)
	}
	if err := d.Check(ctx, w); err != nil {
		t.Fatalf("the waiter's check after the grant expired: %v", err)
	}
	if w.Token <= a.Token {
		t.Errorf("the waiter's token %d after %d", w.Token, a.Token)
	}
}

// TestRowReleaseByOtherOwner: the release of an owner that does not
// hold the row's grant leaves it: the holder keeps the key, and
// holds_grant still says so.
func TestRowReleaseByOtherOwner(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	d := rowDriver(t, url)
	raw := rawPool(t, url)
	key := auditKey("row-release")
	a := rowLease(key, 1, 10*time.Second)
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := rowLease(key, 2, 10*time.Second)
	if err := d.Release(ctx, b); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("a release by another owner: %v, want ErrNotHeld", err)
	}
	c := rowLease(key, 3, 10*time.Second)
	if err := d.Acquire(ctx, c); !isHeld(err) {
		t.Fatalf("an attempt after another owner's release: %v, want held (the release cleared the holder's grant)", err)
	}
	var ok bool
	if err := raw.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(a.Token)).Scan(&ok); err != nil || !ok {
		t.Fatalf("holds_grant for the holder after another owner's release: %v, %v", ok, err)
	}
	if err := d.Release(ctx, a); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
}

// TestRowHoldsGrantExpired: holds_grant is false for a grant in the
// key's row that expired, though no step has cleared it yet.
func TestRowHoldsGrantExpired(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	d := rowDriver(t, url)
	raw := rawPool(t, url)
	key := auditKey("row-holds")
	a := rowLease(key, 1, 300*time.Millisecond)
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := raw.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(a.Token)).Scan(&ok); err != nil || !ok {
		t.Fatalf("holds_grant for a live grant: %v, %v", ok, err)
	}
	time.Sleep(500 * time.Millisecond)
	var holder *string
	if err := raw.QueryRow(ctx, "SELECT holder FROM dlock.keys WHERE key = $1", key).Scan(&holder); err != nil || holder == nil {
		t.Fatalf("the expired grant is not in the row any more (%v, %v): the check needs it", holder, err)
	}
	if err := raw.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(a.Token)).Scan(&ok); err != nil || ok {
		t.Fatalf("holds_grant for an expired grant in the row: %v, %v; want false", ok, err)
	}
}
