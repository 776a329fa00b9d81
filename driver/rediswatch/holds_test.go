package rediswatch

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// namedOwner returns an owner token of the named owner whose 16 hex digits
// are name: one hold's.
func namedOwner(name string) string { return name + owner()[:16] }

// A hold's clean-up after a lost reply removes that hold alone: a re-entry
// whose EXEC comes after the clean-up is aborted, one applied is undone,
// and the first hold keeps the grant, its token and its holds; the
// clean-up of a first hold deletes the grant and its holds.
func TestCleanupAfterLostHoldReply(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		const name = "0123456789abcdef"
		k := testKey(t)
		lk := d.LockKey(k)
		first := &driver.Lease{Key: k, Owner: namedOwner(name), TTL: 10 * time.Second, Reentry: true}
		if err := d.Acquire(ctx, first); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"t": strconv.FormatUint(first.Token, 10), first.Owner: "1"}
		check := func(what string) {
			t.Helper()
			got := rdb.HGetAll(ctx, holdsKey(lk)).Val()
			if len(got) != len(want) || got["t"] != want["t"] || got[first.Owner] != "1" {
				t.Errorf("%s: holds %v, want %v", what, got, want)
			}
			if v := rdb.Get(ctx, lk).Val(); v != first.Owner {
				t.Errorf("%s: the lock key holds %q, want the first hold's %q", what, v, first.Owner)
			}
		}

		cleanUpBeforeExec(t, ctx, d, &driver.Lease{Key: k, Owner: namedOwner(name), TTL: 10 * time.Second, Reentry: true})
		check("after a re-entry aborted by its clean-up")

		l := &driver.Lease{Key: k, Owner: namedOwner(name), TTL: 10 * time.Second, Reentry: true}
		if err := d.Acquire(ctx, l); err != nil || l.Token != first.Token {
			t.Fatalf("re-entry: token %d, err %v; want %d", l.Token, err, first.Token)
		}
		cleanup := *l
		cleanup.Token = 0
		if err := d.Release(ctx, &cleanup); err != nil {
			t.Fatalf("clean-up of an applied re-entry: %v", err)
		}
		check("after the clean-up of an applied re-entry")

		cleanup = *first
		cleanup.Token = 0
		if err := d.Release(ctx, &cleanup); err != nil {
			t.Fatalf("clean-up of the first hold: %v", err)
		}
		if n := rdb.Exists(ctx, lk, holdsKey(lk)).Val(); n != 0 {
			t.Errorf("the clean-up of the last hold left %d of the grant and its holds", n)
		}
	})
}
