package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit38RideContextEnds: a queued Lock whose context ends while it
// rides out a cut connection returns at its context's end (not at the
// ride-out's), and leaves nothing behind once the connection is back:
// its queue entry is gone (its Leave, retried in the background, left
// a tombstone) well before the entry's own life would have ended it
// with the steps of others, and the key goes to the next client as soon
// as its holder releases it.
func TestAudit38RideContextEnds(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 90*time.Second)
	h := newTestLocker(t, url, nil, &netCut{})
	cut := &netCut{}
	w := newTestLocker(t, url, nil, cut)
	key := auditKey("audit38-ride-ctx")
	held, err := h.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := w.Lock(wctx, key)
		res <- err
	}()
	waitFor(t, "the waiter queued", 20*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	cut.setDown(true)
	time.Sleep(time.Second) // riding out
	cancel()
	start := time.Now()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the riding Lock whose context was cancelled: %v, want context.Canceled", err)
		}
		// rideOut is 15 s: a return within 5 s of the cancel is the
		// context's doing, even on a starved machine.
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the riding Lock returned %v after its context was cancelled", took)
		}
	case <-time.After(rideOut + 10*time.Second):
		t.Fatalf("the riding Lock still waits %v after its context was cancelled", rideOut+10*time.Second)
	}
	cut.setDown(false)
	// The entry lives entryLife after the waiter's last step, and only
	// another step on the key purges it; nobody steps on it here, so
	// only the waiter's Leave removes it. Its row stays until then.
	waitFor(t, "the waiter's entry gone", 20*time.Second, func() bool {
		var n int
		raw.QueryRow(ctx, "SELECT count(*) FROM dlock.entries WHERE key = $1 AND NOT granted", key).Scan(&n)
		return n == 0
	})
	var voids int
	if err := raw.QueryRow(ctx, "SELECT count(*) FROM dlock.voids WHERE key = $1", key).Scan(&voids); err != nil || voids != 1 {
		t.Errorf("tombstones of the waiter's attempt: %d, %v; want 1 (its Leave)", voids, err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := newTestLocker(t, url, nil, &netCut{})
	l, err := next.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock of the released key after the waiter gave up: %v", err)
	}
	l.Unlock(ctx)
}

// TestAudit38TryLockNotRidden: a TryLock whose connection is cut fails
// at once with the connection's error, not ErrHeld: a single attempt is
// not ridden out.
func TestAudit38TryLockNotRidden(t *testing.T) {
	url := serverURL(t)
	ctx := tctx(t, 60*time.Second)
	cut := &netCut{}
	w := newTestLocker(t, url, nil, cut)
	warm := auditKey("audit38-tryride-warm")
	l, err := w.TryLock(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	cut.setDown(true)
	start := time.Now()
	_, err = w.TryLock(ctx, auditKey("audit38-tryride"))
	took := time.Since(start)
	if err == nil || errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLock with its connection cut: %v; want the connection's failure", err)
	}
	// rideOut is 15 s; the dial fails at once.
	if took > 5*time.Second {
		t.Errorf("TryLock with its connection cut took %v (ride-out %v)", took, rideOut)
	}
	t.Logf("TryLock failed after %v: %v", took, err)
}
