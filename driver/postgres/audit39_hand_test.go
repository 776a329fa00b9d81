package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Attacks on the hand-over of a key from its release to its first
// waiter (with schema.sql's hand3 the release grants the waiter in the
// key's row, pending until the waiter's next step; without it the
// release wakes the waiter, whose step grants): each passes either way.

// TestAudit39HandOverCancelledWaiters: queued Locks whose contexts end
// at random moments (before, during and after the hand-over to them),
// with a witness of the holds: one holder at a time, tokens rising, and
// at the end the key free at once, no pending grant and no entry left.
func TestAudit39HandOverCancelledWaiters(t *testing.T) {
	url := envDB(t, "audit39_hand_cancel")
	raw := rawPool(t, url)
	ctx := tctx(t, 2*time.Minute)
	key := auditKey("audit39-hand-cancel")
	w := &witness{}
	end := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	given, cancelled := 0, 0
	for i := range 6 {
		lk := newTestLocker(t, url, nil, &netCut{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(end); j++ {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(2+rand.IntN(150))*time.Millisecond)
				l, err := lk.Lock(cctx, key, lock.WithTTL(5*time.Second))
				cancel()
				if err != nil {
					if !errors.Is(err, lock.ErrNotAcquired) {
						t.Errorf("locker %d op %d: %v", i, j, err)
						return
					}
					mu.Lock()
					cancelled++
					mu.Unlock()
					continue
				}
				h := hold{start: time.Now(), token: l.Token(), who: fmt.Sprintf("locker %d op %d", i, j)}
				time.Sleep(time.Duration(rand.IntN(2)) * time.Millisecond)
				h.end = time.Now()
				w.add(h)
				mu.Lock()
				given++
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("%s: Unlock: %v", h.who, err)
				}
			}
		}()
	}
	wg.Wait()
	w.check(t.Errorf)
	t.Logf("%d grants, %d Locks ended by their context; the key: %q", given, cancelled, entriesOf(t, raw, "dlock", key))
	other := newTestLocker(t, url, nil, &netCut{})
	freeWithin(t, other, key, time.Second)
	waitFor(t, "no entry and no grant of the key", 5*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 0 })
}

// TestAudit39HandOverDeadWaiter: the first waiter's Locker is cut off
// (a crashed process) while it waits; the holder unlocks. The key must
// reach the second waiter once the dead one's place has lapsed (its
// entry lives three heartbeats after its last step), not at the dead
// one's TTL, and never to both.
func TestAudit39HandOverDeadWaiter(t *testing.T) {
	url := envDB(t, "audit39_hand_dead")
	raw := rawPool(t, url)
	ctx := tctx(t, time.Minute)
	key := auditKey("audit39-hand-dead")
	a := newTestLocker(t, url, nil, &netCut{})
	cut := &netCut{}
	dead := newTestLocker(t, url, nil, cut)
	second := newTestLocker(t, url, nil, &netCut{})
	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if l, err := dead.Lock(ctx, key, lock.WithTTL(time.Minute)); err == nil {
			t.Errorf("the cut-off Locker was granted (token %d)", l.Token())
		}
	}()
	waitFor(t, "the first waiter's entry", 3*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := second.Lock(ctx, key, lock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "the second waiter's entry", 3*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 3 })
	cut.setDown(true)
	freed := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("after the unlock: %q", entriesOf(t, raw, "dlock", key))
	select {
	case l := <-got:
		t.Logf("the second waiter was granted %v after the unlock (token %d over %d)", time.Since(freed), l.Token(), la.Token())
		if l.Token() <= la.Token() {
			t.Errorf("token %d after %d", l.Token(), la.Token())
		}
		l.Unlock(ctx)
	case <-time.After(3*entryLife + 5*time.Second):
		t.Fatalf("the second waiter still waits %v after the unlock: %q", time.Since(freed), entriesOf(t, raw, "dlock", key))
	}
}

// TestAudit39HandOverLostConfirm: the waiter's step that learns its
// grant (a hand-over confirmed, or the grant itself) has its reply lost
// after the server committed it. The waiter's Lock rides on and holds
// the key with the row's token; nobody else is granted; its Unlock
// frees the key.
func TestAudit39HandOverLostConfirm(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := envDB(t, "audit39_hand_lost")
	raw := rawPool(t, url)
	key := auditKey("audit39-hand-lost")
	a := newTestLocker(t, url, nil, &netCut{})
	other := newTestLocker(t, url, nil, &netCut{})
	p := newReplyDropper(t, serverAddr(t, url))
	wl := dropperLocker(t, url, p, nil)
	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var lw *lock.Lease
	go func() {
		var err error
		lw, err = wl.Lock(ctx, key, lock.WithTTL(30*time.Second))
		got <- err
	}()
	waitFor(t, "the waiter's entry", 3*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	time.Sleep(50 * time.Millisecond)
	p.armed.Store(true)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter's Lock: %v", err)
	}
	t.Logf("replies dropped: %d; the key: %q", p.dropped.Load(), entriesOf(t, raw, "dlock", key))
	if p.dropped.Load() != 1 {
		t.Fatalf("%d replies dropped, want 1 (the test proves nothing)", p.dropped.Load())
	}
	var tok int64
	var holder *string
	if err := raw.QueryRow(ctx, "SELECT holder, token FROM dlock.keys WHERE key = $1", key).Scan(&holder, &tok); err != nil {
		t.Fatal(err)
	}
	if holder == nil || uint64(tok) != lw.Token() || tok <= int64(la.Token()) {
		t.Fatalf("the waiter's token %d, the row's %v %d, the first holder's %d", lw.Token(), holder, tok, la.Token())
	}
	if o, err := other.TryLock(ctx, key); err == nil {
		o.Unlock(ctx)
		t.Fatalf("two holders: %d and %d", lw.Token(), o.Token())
	}
	if err := lw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	freeWithin(t, other, key, time.Second)
}

// TestAudit39PendingNotInherited: a hand-over to a waiter that never
// confirms it (its Locker cut off) leaves a pending grant in the row,
// which expires with the waiter's place; no step runs on the key
// meanwhile. The next TryLock takes the free key by lock3's fast path
// (the dead waiter's entry went with the hand-over): its grant must not
// inherit the dead one's pending mark, which check_turn3 reads to set
// the grant's expiry.
func TestAudit39PendingNotInherited(t *testing.T) {
	url := envDB(t, "audit39_pending")
	raw := rawPool(t, url)
	ctx := tctx(t, time.Minute)
	key := auditKey("audit39-pending")
	a := newTestLocker(t, url, nil, &netCut{})
	cut := &netCut{}
	dead := newTestLocker(t, url, nil, cut)
	la, err := a.Lock(ctx, key) // installs the schema
	if err != nil {
		t.Fatal(err)
	}
	var has bool
	if err := raw.QueryRow(ctx, "SELECT EXISTS (SELECT FROM information_schema.columns WHERE table_schema = 'dlock' AND table_name = 'keys' AND column_name = 'pending')").Scan(&has); err != nil {
		t.Fatal(err)
	}
	if !has {
		t.Skip("no hand-over in the release (keys.pending) in this schema")
	}
	go dead.Lock(ctx, key)
	waitFor(t, "the waiter's entry", 3*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })
	cut.setDown(true)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var pending *bool
	raw.QueryRow(ctx, "SELECT pending FROM dlock.keys WHERE key = $1", key).Scan(&pending)
	if pending == nil || !*pending {
		t.Skipf("the release did not hand the key over (pending %v): %q", pending, entriesOf(t, raw, "dlock", key))
	}
	time.Sleep(entryLife + 500*time.Millisecond)
	lb, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the dead waiter's hand-over lapsed: %v", err)
	}
	defer lb.Unlock(ctx)
	raw.QueryRow(ctx, "SELECT pending FROM dlock.keys WHERE key = $1", key).Scan(&pending)
	if pending != nil {
		t.Errorf("the fast path's grant (token %d) is marked pending %v, inherited from the lapsed hand-over", lb.Token(), *pending)
	}
}
