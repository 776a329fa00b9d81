package memcached

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// A re-entry with a shorter TTL, never released (its holder crashed), does
// not shorten the grant that the first hold counts on: the item's
// expiration is the longest of its holds'. A lost-reply clean-up of a
// re-entry removes that hold alone.
func TestHoldsKeepTheLongestTTL(t *testing.T) {
	c := sharedClient(t)
	d, _ := newDriverOptions(c, selectorOf(c), nil, false)
	ctx := testCtx(t)
	const name = "0123456789abcdef"
	k := testKey(t)
	first := &driver.Lease{Key: k, Owner: name + owner(1)[16:], TTL: 9 * time.Second, Reentry: true}
	if err := d.Acquire(ctx, first); err != nil {
		t.Fatal(err)
	}
	short := &driver.Lease{Key: k, Owner: name + owner(2)[16:], TTL: MinTTL, Reentry: true}
	if err := d.Acquire(ctx, short); err != nil || short.Token != first.Token {
		t.Fatalf("re-entry: token %d, err %v; want %d", short.Token, err, first.Token)
	}
	lost := &driver.Lease{Key: k, Owner: name + owner(3)[16:], TTL: MinTTL, Reentry: true}
	if err := d.Acquire(ctx, lost); err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	lost.Token = 0 // as lock passes it to the clean-up after a lost reply
	if err := d.Release(ctx, lost); err != nil {
		t.Fatalf("clean-up of an applied re-entry: %v", err)
	}
	other := &driver.Lease{Key: k, Owner: "fedcba9876543210" + owner(4)[16:], TTL: MinTTL, Reentry: true}
	if err := d.Acquire(ctx, other); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("another named owner: err = %v, want ErrHeld", err)
	}
	time.Sleep(MinTTL + 2*time.Second) // past the short hold's TTL and memcached's tick
	if _, err := d.Refresh(ctx, first, 9*time.Second); err != nil {
		t.Fatalf("the first hold, after a shorter re-entry's TTL passed: %v", err)
	}
	if err := d.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := d.Acquire(ctx, other); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("with the short hold left: err = %v, want ErrHeld", err)
	}
	if err := d.Release(ctx, short); err != nil {
		t.Fatalf("Release of the short hold: %v", err)
	}
	if _, err := d.c.Get(first.Data.(keys).lock); err == nil {
		t.Errorf("the item is left after the last hold's release")
	}
}
