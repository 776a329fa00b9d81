package redisnx

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A re-entry whose reply never came is cleaned up by removing its own hold
// and nothing else: the first hold keeps the grant, its token and its
// count; whatever order the server runs the queued re-entry and the
// clean-up in, the first hold's Unlock then frees the key and leaves
// nothing behind.
func TestLostReentryReplyKeepsTheGrant(t *testing.T) {
	for _, cancelIt := range []bool{false, true} {
		name := "timeout"
		if cancelIt {
			name = "cancelled"
		}
		t.Run(name, func(t *testing.T) {
			srv, c, raw := stallable(t)
			first := newTestLocker(t, raw, nil)
			l := newTestLocker(t, c, &Options{Options: lockOpts(time.Minute)})
			k := testKey(t)
			rk := lockKey(DefaultPrefix, k)
			held, err := first.TryLock(tctx(t, 10*time.Second), k, lock.WithOwner("job"))
			if err != nil {
				t.Fatalf("TryLock: %v", err)
			}
			// Load the scripts through c, so that the re-entry is one EVALSHA.
			if lease, err := l.TryLock(tctx(t, 10*time.Second), k, lock.WithOwner("job")); err != nil {
				t.Fatalf("re-entry: %v", err)
			} else if err := lease.Unlock(tctx(t, 10*time.Second)); err != nil {
				t.Fatalf("Unlock of the re-entry: %v", err)
			}

			err = duringStall(t, srv, cancelIt, func(ctx context.Context) error {
				_, err := l.TryLock(ctx, k, lock.WithOwner("job"))
				return err
			})
			if !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("re-entry against a stalled server: err = %v, want ErrNotAcquired", err)
			}
			holds := func() map[string]string {
				m, _ := raw.HGetAll(context.Background(), rk+redisx.HoldsSuffix).Result()
				return m
			}
			// The attempt's outcome reaches the client once the server
			// runs again (a re-entry whose reply came after the caller gave
			// up is released), or the clean-up leaves a tombstone for it:
			// either way its hold goes, and only its own.
			time.Sleep(time.Second)
			voided, _ := raw.Keys(context.Background(), rk+redisx.VoidInfix+"*").Result()
			t.Logf("tombstones: %d", len(voided))
			if h := holds(); len(h) != 2 || h["t"] != strconv.FormatUint(held.Token(), 10) {
				t.Fatalf("holds after the lost re-entry: %v, want the first hold and the token %d", h, held.Token())
			}
			if err := held.Err(); err != nil { // set once Done is closed
				t.Fatalf("the first hold ended: %v", err)
			}
			other := newTestLocker(t, raw, nil)
			if lease, err := other.TryLock(tctx(t, 10*time.Second), k); err == nil {
				lease.Unlock(tctx(t, 10*time.Second))
				t.Fatalf("the clean-up of the lost re-entry freed the first hold's key")
			}
			if err := held.Unlock(tctx(t, 10*time.Second)); err != nil {
				t.Fatalf("Unlock of the first hold: %v", err)
			}
			if n, _ := raw.Exists(context.Background(), rk, rk+redisx.HoldsSuffix).Result(); n != 0 {
				t.Errorf("%d of the lock key and its holds left after the last Unlock", n)
			}
		})
	}
}

// A plain SET NX lock of a peer on the key excludes a named owner, and the
// named owner's grant excludes it: the lock key exists while any hold does.
func TestReentryPlainSetNXInterop(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		l := newTestLocker(t, c, nil)
		k := testKey(t)
		rk := lockKey(DefaultPrefix, k)
		if ok, err := c.SetNX(tctx(t, 10*time.Second), rk, "peer-owner", time.Minute).Result(); err != nil || !ok {
			t.Fatalf("SET NX: %v %v", ok, err)
		}
		if _, err := l.TryLock(tctx(t, 10*time.Second), k, lock.WithOwner("peer-owner")); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("a named owner beside a peer's lock: err = %v, want ErrNotAcquired", err)
		}
		c.Del(tctx(t, 10*time.Second), rk)
		l1, err := l.TryLock(tctx(t, 10*time.Second), k, lock.WithOwner("job"))
		if err != nil {
			t.Fatal(err)
		}
		l2, err := l.TryLock(tctx(t, 10*time.Second), k, lock.WithOwner("job"))
		if err != nil {
			t.Fatal(err)
		}
		l1.Unlock(tctx(t, 10*time.Second))
		if ok, err := c.SetNX(tctx(t, 10*time.Second), rk, "peer-owner", time.Minute).Result(); err != nil || ok {
			t.Errorf("a peer's SET NX beside the remaining hold: set %v, %v", ok, err)
		}
		l2.Unlock(tctx(t, 10*time.Second))
		if ok, err := c.SetNX(tctx(t, 10*time.Second), rk, "peer-owner", time.Minute).Result(); err != nil || !ok {
			t.Errorf("a peer's SET NX after the last hold: set %v, %v", ok, err)
		}
		c.Del(tctx(t, 10*time.Second), rk)
	})
}
