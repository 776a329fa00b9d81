package redisnx

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
)

// A wait.lua of a waiter that left may still reach the server after Leave
// even when every reply the driver saw came: go-redis resends a request
// after its read timeout, and when the resend answers, the first copy,
// held in the network, is hidden from the driver. Leave's tombstone makes
// that late copy change nothing: the next release does not hand the key
// to the waiter that left, and another client takes it at once.
func TestLeaveVoidsLateWait(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := testDriver(c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	lease := func() *driver.Lease { return &driver.Lease{Key: k, Owner: randOwner(), TTL: 30 * time.Second} }

	h, w := lease(), lease()
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	joinQueued(t, d, w, make(chan struct{}, 1))
	s := w.Data.(*waiting)
	keys, inbox := s.keys, s.w.Inbox()
	if err := d.Leave(ctx, w); err != nil {
		t.Fatal(err)
	}
	// The first copy of the waiter's wait.lua lands now.
	px, _ := ms(w.TTL)
	res, err := waitScript.Run(ctx, c, keys[:6], w.Owner, px, inbox, redisx.EntryLifeMS, modeArg(w)).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != 0 {
		t.Errorf("a wait.lua that landed after Leave answered %v; want {0, 0}, the attempt abandoned", res)
	}
	if err := other.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	c3 := lease()
	if err := other.Acquire(ctx, c3); err != nil {
		t.Fatalf("another client right after the holder's release: %v (the key holds %q, the waiter that left is %q)", err, c.Get(ctx, lockKey(DefaultPrefix, k)).Val(), w.Owner)
	}
	other.Release(ctx, c3)
}
