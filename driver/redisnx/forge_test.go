package redisnx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A client that may only subscribe and publish on the channels, and hears
// every message, cannot grant a queued waiter the key while another client
// holds it: it publishes messages naming the waiter's owner on its inbox
// and on the key's channel, with low and high tokens and every plausible
// run number, and replays (as heard, and naming the waiter) the messages
// of a real hand-off, each after the waiter acted on the one before, and
// then one run number over and over (the waiter's requests count theirs
// up). The waiter is granted by the holder's release alone,
// with a token above the holder's.
func TestPubSubClientCannotGrant(t *testing.T) {
	c := sharedClient(t, nil)
	spy := redisacl.PubSubUser(t, c, DefaultPrefix)
	heard := redisacl.Listen(t, spy, DefaultPrefix)
	holder, waiter := newTestLocker(t, c, nil), newTestLocker(t, c, nil)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	ctx := tctx(t, 20*time.Second)
	handOff(t, c, holder, waiter, k) // for the spy to hear

	held, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got := lockLater(ctx, waiter, k)
	waitQueued(t, c, lk, 1)
	time.Sleep(20 * time.Millisecond) // the reply of the waiter's wait.lua is in
	owner := c.ZRange(ctx, lk+queueSuffix, 0, 0).Val()[0]
	entry := strings.Fields(c.HGet(ctx, lk+entriesSuffix, owner).Val())
	inbox := entry[len(entry)-1]
	redisacl.ForgeWhileHeld(t, ctx, spy, heard, owner, []string{inbox, lk + channelSuffix}, held, waitFor(got))
}

type granted struct {
	lease *lock.Lease
	err   error
}

// waitFor waits up to d for what lockLater's got reports.
func waitFor(got <-chan granted) func(d time.Duration) (*lock.Lease, bool, error) {
	return func(d time.Duration) (*lock.Lease, bool, error) {
		select {
		case r := <-got:
			return r.lease, true, r.err
		case <-time.After(d):
			return nil, false, nil
		}
	}
}

func lockLater(ctx context.Context, l *lock.Locker, k string) <-chan granted {
	got := make(chan granted, 1)
	go func() {
		lease, err := l.Lock(ctx, k)
		got <- granted{lease, err}
	}()
	return got
}

// handOff has holder lock k, waiter wait for it, and holder release it to
// the waiter, which then releases it too.
func handOff(t *testing.T, c redis.UniversalClient, holder, waiter *lock.Locker, k string) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	held, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got := lockLater(ctx, waiter, k)
	waitQueued(t, c, lockKey(DefaultPrefix, k), 1)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose grant expired before its Lock could use it (lock's revive
// found it gone, another client took the key) waits again with the same
// owner. A hand-over message of its earlier wait that arrives now (held
// back on its pub/sub connection), verbatim or with any run number, gives
// it nothing while the other client holds the key; the next hand-over
// gives it a grant with that hand-over's token, the latest, not the
// earlier grant's. The steps are the driver's own (Join, Check), as lock
// makes them; the waiter's Locker has no grant lists (its blockers are
// none), so that its hand-overs come on its inbox.
func TestStaleHandOverAfterReWait(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := testDriver(c), testDriver(c)
	d.blockers = make(chan struct{})
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	lease := func() *driver.Lease { return &driver.Lease{Key: k, Owner: randOwner(), TTL: 30 * time.Second} }

	h1, w := lease(), lease()
	if err := other.Acquire(ctx, h1); err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	joinQueued(t, d, w, wake)
	inbox := w.Data.(*waiting).w.Inbox()
	sub := c.Subscribe(ctx, inbox)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx, h1); err != nil { // hands the key to w
		t.Fatal(err)
	}
	old, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	drain(wake)
	if err := d.Check(ctx, w); err != nil {
		t.Fatalf("Check after the hand-over: %v", err)
	}
	first := w.Token

	// The grant expires before lock can use it; another client takes the key.
	c.Del(ctx, lk)
	h2 := lease()
	if err := other.Acquire(ctx, h2); err != nil {
		t.Fatal(err)
	}
	joinQueued(t, d, w, wake)
	drain(wake)
	msgs := redisacl.Forgeries(w.Owner, w.Owner, []uint64{first, h2.Token + 1}, nil)
	for _, m := range append(msgs, old.Payload) { // the held-back message last
		c.Publish(ctx, inbox, m)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("the old message did not wake the waiter")
	}
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
	counter, _ := strconv.ParseUint(c.Get(ctx, lk+counterSuffix).Val(), 10, 64)
	if w.Token <= h2.Token || w.Token != counter {
		t.Errorf("token %d after the re-wait; want the last hand-over's, %d (above the other client's %d; the earlier grant's was %d)", w.Token, counter, h2.Token, first)
	}
	if err := d.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
}

// joinQueued runs l's Join and then its Checks until l is in the queue.
func joinQueued(t *testing.T, d *redisDriver, l *driver.Lease, wake chan<- struct{}) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	err := d.Join(ctx, l, wake)
	for errors.Is(err, driver.ErrHeld) && !l.Data.(*waiting).queued {
		time.Sleep(10 * time.Millisecond)
		err = d.Check(ctx, l)
	}
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Join of a held key: %v", err)
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

func randOwner() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
