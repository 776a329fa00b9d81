package redisnx

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

func newLease(key, owner string, ttl time.Duration) *driver.Lease {
	return &driver.Lease{Key: key, Owner: owner, TTL: ttl}
}

const (
	ownerA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	ownerB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// Grant, refresh and release are one command each once the scripts are
// loaded; the grant's validity is the TTL in whole milliseconds, and a
// failed grant tells when the holder's grant expires.
func TestOneRoundTripEach(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		var n counter
		addHook(c, &n)
		d := testDriver(c)
		defer d.Close()
		ctx := tctx(t, 10*time.Second)
		k := testKey(t)
		warmUp := newLease(k, ownerA, time.Second)
		if err := d.Acquire(ctx, warmUp); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		d.Refresh(ctx, warmUp, time.Second)
		d.Release(ctx, warmUp)

		a := newLease(k, ownerA, 5*time.Second+1500*time.Microsecond)
		n.cmds.Store(0)
		if err := d.Acquire(ctx, a); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if got := n.cmds.Load(); got != 1 {
			t.Errorf("Acquire sent %d commands, want 1", got)
		}
		if a.Validity != 5001*time.Millisecond || a.Token == 0 {
			t.Errorf("Validity %v, Token %d; want 5.001s and a token", a.Validity, a.Token)
		}
		b := newLease(k, ownerB, time.Second)
		n.cmds.Store(0)
		err := d.Acquire(ctx, b)
		var held *driver.HeldError
		if !errors.As(err, &held) || held.RetryAfter < 4*time.Second || held.RetryAfter > 5002*time.Millisecond {
			t.Errorf("Acquire of a held key: %v; want a HeldError with the holder's PTTL", err)
		}
		if got := n.cmds.Load(); got != 1 {
			t.Errorf("failed Acquire sent %d commands, want 1", got)
		}
		n.cmds.Store(0)
		if v, err := d.Refresh(ctx, a, 20*time.Second); err != nil || v != 20*time.Second {
			t.Errorf("Refresh: %v, %v", v, err)
		}
		if got := n.cmds.Load(); got != 1 {
			t.Errorf("Refresh sent %d commands, want 1", got)
		}
		if pttl := c.PTTL(ctx, lockKey(DefaultPrefix, k)).Val(); pttl < 19*time.Second {
			t.Errorf("PTTL after Refresh to 20s: %v", pttl)
		}
		if _, err := d.Refresh(ctx, b, time.Second); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh by a non-owner: %v, want ErrNotHeld", err)
		}
		n.cmds.Store(0)
		if err := d.Release(ctx, a); err != nil {
			t.Errorf("Release: %v", err)
		}
		if got := n.cmds.Load(); got != 1 {
			t.Errorf("Release sent %d commands, want 1", got)
		}
		if err := d.Release(ctx, a); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("second Release: %v, want ErrNotHeld", err)
		}
	})
}

// A grant request that reaches the server twice (go-redis resends after a
// timeout) is granted to its owner both times, with a new token; one that
// arrives after the clean-up of its attempt changes nothing.
func TestResentAndLateGrants(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		d := testDriver(c)
		defer d.Close()
		ctx := tctx(t, 10*time.Second)
		k := testKey(t)
		rk := lockKey(DefaultPrefix, k)

		first := newLease(k, ownerA, 10*time.Second)
		if err := d.Acquire(ctx, first); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		again := newLease(k, ownerA, 20*time.Second)
		if err := d.Acquire(ctx, again); err != nil {
			t.Fatalf("the same owner's resent Acquire: %v", err)
		}
		if again.Token <= first.Token || c.PTTL(ctx, rk).Val() < 19*time.Second {
			t.Errorf("resent grant: token %d after %d, PTTL %v; want a greater token and the new TTL", again.Token, first.Token, c.PTTL(ctx, rk).Val())
		}
		if err := d.Release(ctx, again); err != nil {
			t.Fatalf("Release: %v", err)
		}

		// The clean-up of a lost grant runs before the grant reaches the
		// server.
		lost := newLease(k, ownerB, 10*time.Second)
		if err := d.Release(ctx, lost); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("clean-up Release of a grant not made yet: %v, want ErrNotHeld", err)
		}
		late := newLease(k, ownerB, 10*time.Second)
		if err := d.Acquire(ctx, late); !errors.Is(err, driver.ErrHeld) {
			t.Errorf("the late grant of a cleaned-up attempt: %v, want refused", err)
		}
		if n := c.Exists(ctx, rk).Val(); n != 0 {
			t.Errorf("the late grant left the key held")
		}
		if pttl := c.PTTL(ctx, rk+redisx.VoidInfix+ownerB).Val(); pttl <= 0 || pttl > 10*time.Second {
			t.Errorf("tombstone PTTL %v, want the lease TTL", pttl)
		}
		other := newLease(k, ownerA, time.Second)
		if err := d.Acquire(ctx, other); err != nil {
			t.Errorf("another owner after the refused late grant: %v", err)
		}
		d.Release(ctx, other)
	})
}

// A key held without expiry (a foreign SET NX without PX) gives no retry
// hint; a key not held after a cancelled, unsent grant needs no round trip.
func TestHeldWithoutExpiry(t *testing.T) {
	c := sharedClient(t, nil)
	d := testDriver(c)
	defer d.Close()
	ctx := tctx(t, 10*time.Second)
	k := testKey(t)
	c.Set(ctx, lockKey(DefaultPrefix, k), "foreign", 0)
	defer c.Del(ctx, lockKey(DefaultPrefix, k))
	err := d.Acquire(ctx, newLease(k, ownerA, time.Second))
	var held *driver.HeldError
	if !errors.As(err, &held) || held.RetryAfter != 0 {
		t.Errorf("Acquire of a key without expiry: %v, want a HeldError without RetryAfter", err)
	}
}
