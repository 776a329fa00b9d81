package redisnx

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A plain SET NX PX lock on the same Redis key, as redsync and redislock
// take it, and a dlock lease exclude each other.
func TestPlainSetNXInterop(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		l := newTestLocker(t, c, nil)
		k := testKey(t)
		rk := lockKey(DefaultPrefix, k)
		ctx := tctx(t, 10*time.Second)

		// A redsync-style holder first: dlock must not get the key.
		ok, err := c.SetNX(ctx, rk, "redsync-token", 30*time.Second).Result()
		if err != nil || !ok {
			t.Fatalf("SET NX PX by the plain locker: ok=%v err=%v", ok, err)
		}
		if _, err := l.TryLock(ctx, k); !isNotAcquired(err) {
			t.Fatalf("TryLock while a plain SET NX lock holds the key: err = %v, want ErrNotAcquired", err)
		}
		// Its own compare-and-delete release lets dlock in.
		if n, err := c.Eval(ctx, `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`,
			[]string{rk}, "redsync-token").Int(); err != nil || n != 1 {
			t.Fatalf("plain release: n=%d err=%v", n, err)
		}
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock after the plain lock was released: %v", err)
		}

		// A dlock holder: the plain locker must not get the key, and the
		// value it finds is the owner token alone.
		ok, err = c.SetNX(ctx, rk, "redsync-token", 30*time.Second).Result()
		if err != nil || ok {
			t.Fatalf("SET NX PX while dlock holds the key: ok=%v err=%v, want refused", ok, err)
		}
		v, err := c.Get(ctx, rk).Result()
		if err != nil || len(v) != 32 {
			t.Errorf("lock key value %q (err %v), want a 32-digit owner token", v, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		ok, err = c.SetNX(ctx, rk, "redsync-token", 30*time.Second).Result()
		if err != nil || !ok {
			t.Fatalf("SET NX PX after dlock released: ok=%v err=%v", ok, err)
		}
		// dlock's Unlock of a lease it lost never deletes the plain lock.
		if err := lease.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("second Unlock: %v, want ErrNotHeld", err)
		}
		if v, _ := c.Get(ctx, rk).Result(); v != "redsync-token" {
			t.Errorf("plain lock value after dlock's Unlock: %q", v)
		}
		c.Del(ctx, rk)
	})
}
