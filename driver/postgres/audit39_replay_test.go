package postgres

import (
	"testing"
	"time"
)

// TestAudit39ReplayedLockStep: the request of a Lock's first step
// (lock3, queueing) reaches the server twice (a replay). The first
// grants in the key's row; the replay, finding the key held by its own
// owner, must not queue that owner behind itself: its entry would be the
// first waiter, which the holder's release hands the key to (or wakes),
// and which nobody steps, so the next real waiter waits for that entry
// to lapse (three heartbeats).
func TestAudit39ReplayedLockStep(t *testing.T) {
	openAudit39(t, "a replayed lock3 queues the holder behind itself; the next waiter waits ~3 s after the release")
	ctx := tctx(t, time.Minute)
	url := envDB(t, "audit39_replay")
	raw := rawPool(t, url)
	d := rowDriver(t, url)
	key := auditKey("audit39-replay")
	a := rowLease(key, 1, 30*time.Second)
	if err := d.Join(ctx, a, make(chan struct{}, 1)); err != nil {
		t.Fatal(err)
	}
	replay := *a
	err := d.Join(ctx, &replay, make(chan struct{}, 1))
	t.Logf("the replayed step: %v (token %d); the key: %q", err, replay.Token, entriesOf(t, raw, "dlock", key))
	w := rowLease(key, 2, 30*time.Second)
	if err := d.Join(ctx, w, make(chan struct{}, 1)); !isHeld(err) {
		t.Fatalf("the waiter's Join: %v", err)
	}
	if err := d.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		err := d.Check(ctx, w)
		if err == nil {
			break
		}
		if !isHeld(err) {
			t.Fatal(err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the waiter still waits: %q", entriesOf(t, raw, "dlock", key))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the waiter was granted %v after the holder's release", time.Since(start))
	if time.Since(start) > time.Second {
		t.Errorf("the waiter was granted %v after the holder's release: the replay queued the holder behind itself", time.Since(start))
	}
}
