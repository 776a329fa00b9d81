package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
)

// setLeases are the leases of a set at keys (sorted), as lock makes them.
func setLeases(keys ...string) []*driver.Lease {
	ls := make([]*driver.Lease, len(keys))
	for i, k := range keys {
		ls[i] = &driver.Lease{Key: k, Owner: auditKey("set-owner"), Mode: driver.Exclusive, TTL: 30 * time.Second}
	}
	return ls
}

// rowHolders are the holders in the keys' rows (live or not), "" for
// none or no row.
func rowHolders(t *testing.T, url string, keys ...string) []string {
	t.Helper()
	raw := rawPool(t, url)
	out := make([]string, len(keys))
	for i, k := range keys {
		err := raw.QueryRow(context.Background(), "SELECT coalesce(holder, '') FROM dlock.keys WHERE key = $1", k).Scan(&out[i])
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	return out
}

// TestSetOneStep: a free set is taken in one step (Atomic), its members
// are ordinary grants in the keys' rows (a TryLock of a member is
// refused, holds_grant sees the token), and its tokens rise with the
// single-key grants of the same keys.
func TestSetOneStep(t *testing.T) {
	url := serverURL(t)
	a, _ := driverLocker(t, url, nil)
	b, _ := driverLocker(t, url, nil)
	ctx := tctx(t, 30*time.Second)
	k1, k2 := auditKey("set-a"), auditKey("set-b")
	before, err := b.TryLock(ctx, k2)
	if err != nil {
		t.Fatal(err)
	}
	if err := before.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := a.TryLockMany(ctx, []string{k2, k1})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Atomic() {
		t.Error("a free set was not taken in one step")
	}
	tok2, _ := m.Token(k2)
	if tok2 <= before.Token() {
		t.Errorf("the set's token of %s is %d, not above the earlier grant's %d", k2, tok2, before.Token())
	}
	for _, k := range []string{k1, k2} {
		if _, err := b.TryLock(ctx, k); !errors.Is(err, lock.ErrHeld) {
			t.Errorf("TryLock of the set's member %s: %v, want ErrHeld", k, err)
		}
		tok, _ := m.Token(k)
		var ok bool
		if err := rawPool(t, url).QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", k, int64(tok)).Scan(&ok); err != nil || !ok {
			t.Errorf("holds_grant(%s, the set's token) = %v, %v; want true", k, ok, err)
		}
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := b.TryLock(ctx, k2)
	if err != nil {
		t.Fatal(err)
	}
	if after.Token() <= tok2 {
		t.Errorf("a grant after the set has token %d, not above the set's %d", after.Token(), tok2)
	}
	after.Unlock(ctx)
}

// TestSetRefusedLeavesNothing: a set with one key held (the middle one,
// so the keys before and after it are granted by their own lock3 first)
// is refused as held, with the holder's time left as RetryAfter, and
// leaves no grant of its own; a key with only a waiter (an entry, no
// grant) refuses it too.
func TestSetRefusedLeavesNothing(t *testing.T) {
	url := serverURL(t)
	a, d := driverLocker(t, url, nil)
	b, _ := driverLocker(t, url, nil)
	ctx := tctx(t, 30*time.Second)
	k := auditKey("set-refused")
	ks := []string{k + "/a", k + "/b", k + "/c"}
	held, err := b.Lock(ctx, ks[1], lock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ls := setLeases(ks...)
	err = d.AcquireSet(ctx, ls)
	var he *driver.HeldError
	if !errors.As(err, &he) || he.RetryAfter <= 10*time.Second || he.RetryAfter > 21*time.Second {
		t.Errorf("AcquireSet over a held key: %v, want a HeldError with the holder's time left (about 20s)", err)
	}
	for _, l := range ls {
		if l.Token != 0 {
			t.Errorf("refused set: lease of %s has token %d", l.Key, l.Token)
		}
	}
	if got := rowHolders(t, url, ks...); got[0] != "" || got[2] != "" || got[1] == "" {
		t.Errorf("after a refused set the rows' holders are %q; want only the middle key's holder", got)
	}
	if _, err := a.TryLockMany(ctx, ks); !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLockMany over a held key: %v, want ErrHeld", err)
	}
	for _, k := range []string{ks[0], ks[2]} {
		l, err := b.TryLock(ctx, k)
		if err != nil {
			t.Errorf("a key of a refused set is not free: %v", err)
			continue
		}
		l.Unlock(ctx)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A waiter, no grant: the set does not pass it.
	if _, err := rawPool(t, url).Exec(ctx, "INSERT INTO dlock.entries (key, owner, mode, expires, joined) VALUES ($1, 'a-waiter', 0, clock_timestamp() + interval '1 minute', clock_timestamp())", ks[2]); err != nil {
		t.Fatal(err)
	}
	ls = setLeases(ks...)
	if err := d.AcquireSet(ctx, ls); !errors.Is(err, driver.ErrHeld) {
		t.Errorf("AcquireSet over a key with a waiter: %v, want ErrHeld", err)
	}
	if got := rowHolders(t, url, ks...); got[0] != "" || got[1] != "" || got[2] != "" {
		t.Errorf("a set refused by a waiter left holders %q", got)
	}
}

// TestSetLostReply: the clean-up of a set whose outcome is unknown (a
// Release per lease) ends the grants the set committed; after a set that
// was refused, it leaves tombstones, and the same step arriving late
// grants nothing.
func TestSetLostReply(t *testing.T) {
	url := serverURL(t)
	_, d := driverLocker(t, url, nil)
	ctx := tctx(t, 30*time.Second)
	k := auditKey("set-lost")
	ks := []string{k + "/a", k + "/b"}
	ls := setLeases(ks...)
	if err := d.AcquireSet(ctx, ls); err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		l.Token = 0 // the reply was lost
		if err := d.Release(ctx, l); err != nil {
			t.Errorf("Release of a committed member %s: %v", l.Key, err)
		}
	}
	if got := rowHolders(t, url, ks...); got[0] != "" || got[1] != "" {
		t.Errorf("after the releases the rows hold %q", got)
	}
	// Released before it arrived: it finds the tombstones.
	late := setLeases(ks...)
	for _, l := range late {
		if err := d.Release(ctx, l); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release before the step: %v, want ErrNotHeld", err)
		}
	}
	if err := d.AcquireSet(ctx, late); err == nil || errors.Is(err, driver.ErrHeld) {
		t.Errorf("a late set step after its clean-up: %v, want it refused as abandoned", err)
	}
	if got := rowHolders(t, url, ks...); got[0] != "" || got[1] != "" {
		t.Errorf("a late set step left holders %q", got)
	}
}
