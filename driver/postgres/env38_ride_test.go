package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestEnv38PgBouncerRestartRidden: a queued Lock through PgBouncer rides
// out the pooler's restarts (down 0.7 s each): its steps' connection
// failures are waited out, and it is granted when the holder lets go.
// Every waiting Lock failed with the raw connection error. A TryLock
// while PgBouncer is down still fails at once.
func TestEnv38PgBouncerRestartRidden(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	raw := rawPool(t, pg.URL())
	ctx := tctx(t, 120*time.Second)
	h := newTestLocker(t, pg.URL(), nil, &netCut{})
	w := newLockerWith(t, b.URL(), &Options{TransactionPooling: true}, &netCut{})
	key := auditKey("env38-ride")
	held, err := h.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		l, err := w.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		res <- err
	}()
	waitFor(t, "the waiter queued", 10*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	for range 3 {
		if err := b.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
		if err := b.Restart(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	select {
	case err := <-res:
		t.Fatalf("the queued Lock ended during PgBouncer's restarts: %v", err)
	default:
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the queued Lock: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the queued Lock was not granted 20 s after the holder's release")
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = w.TryLock(ctx, key)
	took := time.Since(start)
	if err == nil || errors.Is(err, lock.ErrHeld) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock with PgBouncer down: %v; want the connection failure", err)
	}
	if took > 5*time.Second {
		t.Fatalf("TryLock with PgBouncer down returned after %v; want at once", took)
	}
	t.Logf("TryLock with PgBouncer down, after %v: %v", took, err)
}

// TestEnv38RideOutBounded: a queued Lock whose connection stays down
// rides it out in the queue for rideOut, and then, by lock's outage rule,
// goes on trying until its context ends: it is granted once the
// connection is back and the holder lets go.
func TestEnv38RideOutBounded(t *testing.T) {
	url := serverURL(t)
	ctx := tctx(t, 90*time.Second)
	h := newTestLocker(t, url, nil, &netCut{})
	cut := &netCut{}
	w := newTestLocker(t, url, nil, cut)
	key := auditKey("env38-ride-bound")
	held, err := h.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		l, err := w.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		res <- err
	}()
	raw := rawPool(t, url)
	waitFor(t, "the waiter queued", 10*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	cut.setDown(true)
	select {
	case err := <-res:
		t.Fatalf("the queued Lock ended while its connection was down: %v", err)
	case <-time.After(rideOut + 3*time.Second):
	}
	cut.setDown(false)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the Lock after its connection came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the Lock was not granted 30 s after its connection came back and the holder let go")
	}
}
