package rediswatch

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
)

// A client that may only subscribe and publish on the channels, and hears
// every message, cannot grant a queued waiter the key while another client
// holds it: it publishes messages naming the waiter's owner on its inbox
// and on the key's channel, with low and high tokens, every plausible run
// number and next waiter, and replays (as heard, and naming the waiter)
// the messages of a real hand-off, each after the waiter acted on the one
// before, and then one run number over and over. The waiter is granted by
// the holder's release alone, with a token above the holder's.
func TestPubSubClientCannotGrant(t *testing.T) {
	rdb := standalone(t)
	spy := redisacl.PubSubUser(t, rdb, DefaultPrefix)
	heard := redisacl.Listen(t, spy, DefaultPrefix)
	holder, _ := newTestLocker(t, rdb, nil)
	waiter, _ := newTestLocker(t, rdb, nil)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	ctx := testCtx(t)
	for range 2 { // for the spy to hear; the second joins with the inbox
		held, err := holder.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got := lockLater(ctx, waiter, k)
		waiterAt(t, rdb, lk, 0)
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.lease.Unlock(ctx)
	}

	held, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got := lockLater(ctx, waiter, k)
	owner, inbox := waiterAt(t, rdb, lk, 0)
	time.Sleep(20 * time.Millisecond) // the reply of the waiter's join is in
	if inbox == "" {
		t.Fatalf("the waiter joined without its inbox")
	}
	redisacl.ForgeWhileHeld(t, ctx, spy, heard, owner, []string{inbox, channel(lk)}, held, waitFor(got))
}

// A waiter whose grant expired before its Lock could use it (lock's revive
// found it gone, another client took the key) waits again with the same
// owner. A hand-over message of its earlier wait that arrives now (held
// back on its pub/sub connection), verbatim or with any run number, gives
// it nothing while the other client holds the key; the next hand-over
// gives it a grant with that hand-over's token, the latest, not the
// earlier grant's. The steps are the driver's own (Join, Check), as lock
// makes them.
func TestStaleHandOverAfterReWait(t *testing.T) {
	rdb := standalone(t)
	d, other := testDriver(rdb, DefaultPrefix), testDriver(rdb, DefaultPrefix)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := testCtx(t)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	lease := func() *driver.Lease { return &driver.Lease{Key: k, Owner: owner(), TTL: 30 * time.Second} }

	h1, w := lease(), lease()
	if err := other.Acquire(ctx, h1); err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	if err := d.Join(ctx, w, wake); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Join of a held key: %v", err)
	}
	_, inbox := waiterAt(t, rdb, lk, 0)
	chans := []string{channel(lk)}
	if inbox != "" {
		chans = append(chans, inbox)
	}
	sub := rdb.Subscribe(ctx, chans...)
	defer sub.Close()
	for range chans {
		if _, err := sub.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
	}
	if !eventually(5*time.Second, func() bool { return d.Notify.Confirmed(lk) }) {
		t.Fatal("the waiter's subscriptions are not confirmed")
	}
	// Hand the key to w.
	if err := other.Release(ctx, h1); err != nil {
		t.Fatal(err)
	}
	old, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(ctx, w); err != nil {
		t.Fatalf("Check after the hand-over: %v", err)
	}
	first := w.Token

	// The grant expires before lock can use it; another client takes the key.
	rdb.Del(ctx, lk)
	h2 := lease()
	if err := other.Acquire(ctx, h2); err != nil {
		t.Fatal(err)
	}
	if err := d.Join(ctx, w, wake); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Join again, the key held by another: %v", err)
	}
	_, inbox = waiterAt(t, rdb, lk, 0)
	drain(wake)
	msgs := redisacl.Forgeries(w.Owner, w.Owner, []uint64{first, h2.Token + 1}, nil)
	for _, m := range append(msgs, old.Payload) { // the held-back message last
		for _, ch := range []string{inbox, channel(lk)} {
			if ch != "" {
				rdb.Publish(ctx, ch, m)
			}
		}
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("the old message did not wake the waiter")
	}
	time.Sleep(20 * time.Millisecond) // every message is in
	err = d.Check(ctx, w)
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Check after a stale hand-over message, another client holding the key: err = %v (token %d, holder's %d), want ErrHeld", err, w.Token, h2.Token)
	}

	drain(wake)
	if err := other.Release(ctx, h2); err != nil { // hands the key to w again
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("the hand-over did not wake the waiter")
	}
	if err := d.Check(ctx, w); err != nil {
		t.Fatalf("Check after the second hand-over: %v", err)
	}
	counter, _ := strconv.ParseUint(rdb.Get(ctx, counterKey(lk)).Val(), 10, 64)
	if w.Token <= h2.Token || w.Token != counter {
		t.Errorf("token %d after the re-wait; want the last hand-over's, %d (above the other client's %d; the earlier grant's was %d)", w.Token, counter, h2.Token, first)
	}
	if err := d.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
}

// A join whose reply was lost may reach the server after the waiter's
// Leave: here Leave runs just before the join's EXEC is sent, as lock
// runs it after the step failed. The join must change nothing: the
// holder's release then hands the key to no one, and another client's
// TryLock right after it succeeds. The same for the join inside a renewal
// that found the waiter's entry dead.
func TestLeaveVoidsLateJoin(t *testing.T) {
	for _, step := range []string{"join", "renewal"} {
		t.Run(step, func(t *testing.T) {
			rdb := standalone(t)
			holder, _ := newTestLocker(t, rdb, nil)
			other, _ := newTestLocker(t, rdb, nil)
			d := testDriver(rdb, DefaultPrefix)
			t.Cleanup(func() { d.Close() })
			ctx := testCtx(t)
			k := testKey(t)
			lk := redisx.LockKey(DefaultPrefix, k)
			held, err := holder.TryLock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			w := &driver.Lease{Key: k, Owner: owner(), TTL: 20 * time.Second}
			wake := make(chan struct{}, 1)
			var once sync.Once
			leaveFirst := func(op, _ string) {
				if op == "join" {
					once.Do(func() {
						if err := d.Leave(ctx, w); err != nil {
							t.Errorf("Leave: %v", err)
						}
					})
				}
			}
			if step == "join" {
				d.beforeExec.Store(&leaveFirst)
				err = d.Join(ctx, w, wake)
			} else {
				if err := d.Join(ctx, w, wake); !errors.Is(err, driver.ErrHeld) {
					t.Fatalf("Join: %v", err)
				}
				rdb.Del(ctx, waitEntry(lk, w.Owner)) // the entry died
				w.Data.(*waiting).renewed = time.Time{}
				d.beforeExec.Store(&leaveFirst)
				err = d.Check(ctx, w)
			}
			d.beforeExec.Store(nil)
			t.Logf("the %s after Leave: %v", step, err)
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l, err := other.TryLock(ctx, k)
			if err != nil {
				q := rdb.LRange(ctx, waitQueue(lk), 0, -1).Val()
				t.Fatalf("TryLock right after the holder's Unlock: %v (queue %q, key held by %q)", err, q, rdb.Get(ctx, lk).Val())
			}
			l.Unlock(ctx)
		})
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}
