package redisnx

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// joinInline starts d.Join(ctx, l) (an inline step: it blocks on the
// grant list) and returns its result's channel once the server has a
// client blocked more than before.
func joinInline(t *testing.T, ctx context.Context, d *redisDriver, l *driver.Lease) <-chan error {
	t.Helper()
	before := blocked(d.Client)
	res := make(chan error, 1)
	go func() { res <- d.Join(ctx, l, make(chan struct{}, 1)) }()
	if !eventually(5*time.Second, func() bool { return blocked(d.Client) > before }) {
		t.Fatal("the inline step never blocked on the grant list")
	}
	return res
}

// A waiter's inline step (LLEN, wait.lua, BLPOP in one pipeline) returns
// the grant that the release pushed while it blocked: the Join itself
// returns the key, with the counter's token, and the list is gone.
func TestInlineStepTakesThePushedGrant(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := inlineDriver(t, c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	h, w := listLease(k), listLease(k)
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	// The subscriptions first, so that Join queues at once.
	d.Notify.Queue(lk, randOwner(), make(chan struct{}, 1))
	eventually(5*time.Second, func() bool { return d.Notify.Confirmed(lk) })
	res := joinInline(t, ctx, d, w)
	list := w.Data.(*waiting).f.keys[6]
	if err := other.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatalf("the inline step, the key handed over while it blocked: %v", err)
	}
	counter, _ := strconv.ParseUint(c.Get(ctx, lk+counterSuffix).Val(), 10, 64)
	if w.Token != counter || w.Token <= h.Token {
		t.Errorf("token %d; want the counter's %d, above the holder's %d", w.Token, counter, h.Token)
	}
	if n := c.Exists(ctx, list).Val(); n != 0 {
		t.Errorf("the grant list %s is left behind", list)
	}
	d.Release(ctx, w)
}

// A grant found in the list before the step was sent (LLEN saw it) only
// wakes the waiter: a step whose BLPOP takes it grants nothing while
// another client holds the key.
func TestInlineStepIgnoresEarlierPush(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := inlineDriver(t, c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	h, w := listLease(k), listLease(k)
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	d.Notify.Queue(lk, randOwner(), make(chan struct{}, 1))
	eventually(5*time.Second, func() bool { return d.Notify.Confirmed(lk) })
	w.TTL = 300 * time.Millisecond // the first step blocks this long
	res := joinInline(t, ctx, d, w)
	if err := <-res; !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("the first step: %v, want ErrHeld", err)
	}
	s := w.Data.(*waiting)
	forged := s.f.nonce + " " + strconv.FormatUint(h.Token+1, 10)
	if err := c.RPush(ctx, s.f.keys[6], forged).Err(); err != nil {
		t.Fatal(err)
	}
	if err := d.Check(ctx, w); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("a step that found %q in the list: %v (token %d), want ErrHeld", forged, err, w.Token)
	}
	if v := c.Get(ctx, lk).Val(); v != h.Owner {
		t.Errorf("lock key holds %q, want the holder %q", v, h.Owner)
	}
	d.Leave(ctx, w)
	other.Release(ctx, h)
}

// A Lock cancelled while its inline step blocks returns by its context's
// end (the lane's connection is closed, which ends the BLPOP on the
// server), and its Leave leaves nothing: no queue entry, no grant list.
func TestInlineStepCancelled(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := inlineDriver(t, c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	h, w := listLease(k), listLease(k)
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	d.Notify.Queue(lk, randOwner(), make(chan struct{}, 1))
	eventually(5*time.Second, func() bool { return d.Notify.Confirmed(lk) })
	before := blocked(c)
	wctx, cancel := context.WithCancel(ctx)
	res := joinInline(t, wctx, d, w)
	list := w.Data.(*waiting).f.keys[6]
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled step: %v, want context.Canceled", err)
		}
	case <-time.After(500 * time.Millisecond):
		t.Fatal("the cancelled step still blocks")
	}
	if !eventually(5*time.Second, func() bool { return blocked(c) <= before }) {
		t.Error("the BLPOP is still blocked on the server")
	}
	// A push that came meanwhile: Leave passes the key on and deletes it.
	c.RPush(ctx, list, "0 1")
	if err := d.Leave(ctx, w); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, list).Val(); n != 0 {
		t.Errorf("the grant list %s is left behind", list)
	}
	if c.ZScore(ctx, lk+queueSuffix, w.Owner).Err() == nil {
		t.Error("the waiter is still queued")
	}
	other.Release(ctx, h)
}
