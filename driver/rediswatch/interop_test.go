package rediswatch

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A holder that speaks redisnx's wire format (and redsync's, redislock's):
// a plain SET <prefix>{key} token NX PX on the same lock key, a DEL and a
// PUBLISH on <prefix>{key}:released to release, an INCR of the shared
// counter per grant. It and rediswatch exclude each other, wake each
// other's waiters and share the fencing counter.
func TestInteropWithPlainSetNX(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l, _ := newTestLocker(t, rdb, nil)
		k := testKey(t)
		lk, ck, ch := "dlock:{"+k+"}", "dlock:{"+k+"}:fence", "dlock:{"+k+"}:rel"
		rawLock := func(ttl time.Duration) bool {
			t.Helper()
			ok, err := rdb.SetNX(ctx, lk, "raw-holder", ttl).Result()
			if err != nil {
				t.Fatalf("SET NX PX: %v", err)
			}
			if ok {
				rdb.Incr(ctx, ck)
			}
			return ok
		}

		// rediswatch holds: the raw SET NX fails; the value is the owner token.
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if rawLock(time.Minute) {
			t.Fatalf("a raw SET NX took a key held by rediswatch")
		}
		if v := rdb.Get(ctx, lk).Val(); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(v) {
			t.Errorf("lock key holds %q, want the owner token", v)
		}
		first := lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}

		// The raw holder holds: TryLock fails, a waiter is woken by its
		// release's PUBLISH.
		if !rawLock(time.Minute) {
			t.Fatalf("raw SET NX failed on a free key")
		}
		if _, err := l.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryLock on a key held by a raw SET NX: err = %v, want ErrNotAcquired", err)
		}
		got := make(chan error, 1)
		go func() {
			// A retry backoff far longer than the test: only the
			// notification can wake this waiter in time.
			lease, err := l.Lock(ctx, k, lock.WithRetry(lock.LinearBackoff(time.Hour)))
			if err == nil {
				if lease.Token() <= first+1 {
					t.Errorf("token %d after the raw holder's INCR, want more than %d", lease.Token(), first+1)
				}
				err = lease.Unlock(ctx)
			}
			got <- err
		}()
		time.Sleep(300 * time.Millisecond) // the waiter waits
		released := time.Now()
		rdb.Del(ctx, lk)
		rdb.Publish(ctx, ch, "")
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			if d := time.Since(released); d > time.Second {
				t.Errorf("waiter granted %v after the raw release", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter not woken by the raw release's PUBLISH")
		}

		// A raw holder that never releases: the waiter retries when its
		// PTTL, read with the failed grant, has passed.
		if !rawLock(700 * time.Millisecond) {
			t.Fatalf("raw SET NX failed on a free key")
		}
		start := time.Now()
		lease, err = l.Lock(ctx, k, lock.WithRetry(lock.LinearBackoff(time.Hour)))
		if err != nil {
			t.Fatalf("Lock after the raw holder's expiry: %v", err)
		}
		if d := time.Since(start); d > 700*time.Millisecond+time.Second {
			t.Errorf("granted %v after a 700ms raw grant; the PTTL hint was not used", d)
		}
		lease.Unlock(ctx)
	})
}

// The key prefix option changes every name, and a URL's prefix parameter
// sets it.
func TestKeyPrefix(t *testing.T) {
	rdb := standalone(t)
	ctx := testCtx(t)
	l, err := lock.Open(ctx, "rediswatch://"+rdb.Options().Addr+"?prefix=app-locks:")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k := testKey(t)
	lease, err := l.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "app-locks:{"+k+"}").Val(); v == "" {
		t.Errorf("no lock key app-locks:{%s}", k)
	}
	if n := rdb.Exists(ctx, DefaultPrefix+"{"+k+"}").Val(); n != 0 {
		t.Errorf("the default prefix was used too")
	}
	if tok, _ := rdb.Get(ctx, "app-locks:{"+k+"}:fence").Uint64(); tok != lease.Token() {
		t.Errorf("counter app-locks:{%s}:fence = %d, want the token %d", k, tok, lease.Token())
	}
	lease.Unlock(ctx)
}

// Tokens follow the server's clock in microseconds, or the counter when it
// is ahead (redisnx's rule): they keep increasing when the counter is lost
// or set back, as after a restart or a failover to a lagging replica.
func TestTokensFollowServerClock(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l, _ := newTestLocker(t, rdb, nil)
		k := testKey(t)
		lk := DefaultPrefix + "{" + k + "}"
		serverTime := func() uint64 {
			var c *redis.Client
			switch r := rdb.(type) {
			case *redis.Client:
				c = r
			case *redis.ClusterClient:
				var err error
				if c, err = r.MasterForKey(ctx, lk); err != nil {
					t.Fatal(err)
				}
			}
			return uint64(c.Time(ctx).Val().UnixMicro())
		}
		var last uint64
		grant := func(what string) {
			t.Helper()
			before := serverTime()
			lease, err := l.TryLock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			lease.Unlock(ctx)
			if lease.Token() <= last || lease.Token() < before {
				t.Errorf("%s: token %d, want above the previous %d and at least the server's time %d µs", what, lease.Token(), last, before)
			}
			last = lease.Token()
		}
		grant("first grant")
		// Finding 13: keys locked once do not keep a counter forever.
		if ttl := rdb.PTTL(ctx, counterKey(lk)).Val(); ttl <= fenceLife-time.Minute || ttl > fenceLife {
			t.Errorf("fencing counter's PTTL %v; want about %v", ttl, fenceLife)
		}
		grant("second grant")
		rdb.Del(ctx, counterKey(lk))
		grant("after the counter was lost")
		rdb.Set(ctx, counterKey(lk), 5, 0)
		grant("after the counter went back")
		ahead := serverTime() + uint64(time.Hour/time.Microsecond)
		rdb.Set(ctx, counterKey(lk), ahead, 0)
		grant("after the counter went ahead of the clock")
		if last != ahead+1 {
			t.Errorf("token %d after the counter was set to %d, want %d", last, ahead, ahead+1)
		}
	})
}

// A key that starts with "}" would give its names an empty hash tag, which
// Redis ignores; it is carried as "\xff" + key, as redisnx does, so that the
// lock and its counter stay in one slot and the key works everywhere.
func TestKeyStartingWithBrace(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l, _ := newTestLocker(t, rdb, nil)
		k := "}" + testKey(t)
		lk := "dlock:{\xff" + k + "}"
		if redisx.Slot(lk) != redisx.Slot(lk+":fence") {
			t.Fatalf("lock and counter in different slots")
		}
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", k, err)
		}
		if owner := rdb.Get(ctx, lk).Val(); owner == "" {
			t.Errorf("no lock key %q", lk)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})
}

// A prefix with braces is refused: the key's braces must be the hash tag.
func TestPrefixWithBraces(t *testing.T) {
	l := New(standalone(t), &Options{Prefix: "app{1}:"})
	defer l.Close()
	if _, err := l.TryLock(context.Background(), "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("TryLock with prefix app{1}: err = %v, want ErrInvalid", err)
	}
}
