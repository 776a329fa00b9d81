package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestReleasePinsSlot: while a release's delete of its name is under
// way (pinned), a holder watch's unreserve does not give the slot back,
// so no other attempt of the Locker writes under the name the delete
// may hit; after it, the release gives it back.
func TestReleasePinsSlot(t *testing.T) {
	d, _ := testDriver(t, testserver.SharedEtcd(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := "pinned"
	a := &driver.Lease{Key: k, Owner: slotOwner(1), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	name := a.Data.(grantRef).name
	if !d.pin(a.Owner, k, name) {
		t.Fatal("pin of a's own slot failed")
	}
	d.unreserve(a.Owner) // as a's holder watch does when it sees the entry deleted
	b := &driver.Lease{Key: k, Owner: slotOwner(2), TTL: 10 * time.Second}
	if got := d.reserve(b); got == name {
		t.Fatalf("b took a's name %s while a's release was pinned to it", name)
	}
	d.unreserve(b.Owner)
	d.unpin(a.Owner, true)
	if err := d.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	c := &driver.Lease{Key: k, Owner: slotOwner(3), TTL: 10 * time.Second}
	if got := d.reserve(c); got != name {
		t.Fatalf("after a's release, c has %s, want a's name %s back", got, name)
	}
	d.unreserve(c.Owner)
}

// TestReleaseUnknownBurnsSlot: a release whose KV/DeleteRange has no
// definite reply (it may still land) burns its slot: the release made
// again compares the entry's create revision, and no later grant of the
// Locker takes the name the lost delete may hit.
func TestReleaseUnknownBurnsSlot(t *testing.T) {
	d, r := testDriver(t, testserver.SharedEtcd(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := "burnt"
	a := &driver.Lease{Key: k, Owner: slotOwner(1), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	name := a.Data.(grantRef).name
	dead, kill := context.WithCancel(ctx)
	kill()
	if err := d.Release(dead, a); err == nil {
		t.Fatal("a release with its context ended went through")
	}
	r.reset()
	if err := d.Release(ctx, a); err != nil {
		t.Fatalf("the release made again: %v", err)
	}
	if got := r.reset(); got["/etcdserverpb.KV/DeleteRange"] != 0 || got["/etcdserverpb.KV/Txn"] != 1 {
		t.Errorf("the release made again sent %v; want one KV/Txn comparing the create revision", got)
	}
	for i := range 3 {
		c := &driver.Lease{Key: k, Owner: slotOwner(10 + i), TTL: 10 * time.Second}
		if err := d.Acquire(ctx, c); err != nil {
			t.Fatal(err)
		}
		if got := c.Data.(grantRef).name; got == name {
			t.Fatalf("grant %d took %s, the name of a release whose delete may land later", i, name)
		}
		if err := d.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
}
