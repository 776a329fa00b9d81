package redisnx

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/redis/go-redis/v9"
)

// Tokens keep increasing across a server restart that lost every key: the
// counter is seeded again from the server's clock.
func TestFencingAcrossRestartWithoutPersistence(t *testing.T) {
	srv := testserver.StartRedis(t, &testserver.RedisOptions{Persistence: false})
	srv.RequireFaults(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	l := newTestLocker(t, c, nil)
	k := testKey(t)
	ctx := tctx(t, 30*time.Second)

	var last uint64
	for range 5 {
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		if lease.Token() <= last {
			t.Fatalf("token %d after %d", lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	if err := srv.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("after the restart: DBSIZE = %d, %v; want an empty server", n, err)
	}
	lease, err := l.TryLock(ctx, k) // also runs the script on an empty script cache
	if err != nil {
		t.Fatalf("TryLock after the restart: %v", err)
	}
	defer lease.Unlock(ctx)
	if lease.Token() <= last {
		t.Errorf("token after a restart without persistence %d, not greater than %d before it", lease.Token(), last)
	}
}

// Tokens keep increasing when the counter is set back, as after a failover
// to a replica that had not received the latest increments: a grant takes
// the server's clock when it is ahead of the counter.
func TestFencingAfterCounterSetBack(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		l := newTestLocker(t, c, nil)
		k := testKey(t)
		ctx := tctx(t, 30*time.Second)
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		first := lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if err := c.Set(ctx, lockKey(DefaultPrefix, k)+counterSuffix, 5, 0).Err(); err != nil {
			t.Fatalf("setting the counter back: %v", err)
		}
		lease, err = l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock after the counter was set back: %v", err)
		}
		defer lease.Unlock(ctx)
		if lease.Token() <= first {
			t.Errorf("token %d after the counter was set back, not greater than %d before", lease.Token(), first)
		}
	})
}

// Finding 13: a key locked once does not leave its fencing counter
// forever: the counter expires a week after the last grant, and tokens
// start again from the server's clock after that (TestFencingAfterCounterSetBack).
func TestFencingCounterExpires(t *testing.T) {
	c := sharedClient(t, nil)
	l := newTestLocker(t, c, nil)
	k := testKey(t)
	ctx := tctx(t, 10*time.Second)
	lease, err := l.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	ttl := c.PTTL(ctx, lockKey(DefaultPrefix, k)+counterSuffix).Val()
	if week := 7 * 24 * time.Hour; ttl <= week-time.Minute || ttl > week {
		t.Errorf("fencing counter's PTTL %v; want about a week", ttl)
	}
}

// A counter ahead of the server's clock (tokens given in a burst within one
// microsecond, or by a server whose clock ran ahead) is counted on from, not
// set back to the clock: each grant's token is the counter plus one, and
// the counter keeps it.
func TestFencingCounterAheadOfClock(t *testing.T) {
	c := sharedClient(t, nil)
	l := newTestLocker(t, c, nil)
	k := testKey(t)
	ctx := tctx(t, 10*time.Second)
	ck := lockKey(DefaultPrefix, k) + counterSuffix
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	if err := c.Set(ctx, ck, ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 2; i++ {
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		if got := lease.Token(); got != ahead+i {
			t.Errorf("grant %d: token %d, want the counter plus one, %d", i, got, ahead+i)
		}
		if v, err := c.Get(ctx, ck).Uint64(); err != nil || v != ahead+i {
			t.Errorf("grant %d: counter %d (%v), want %d", i, v, err, ahead+i)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ttl := c.PTTL(ctx, ck).Val(); ttl <= 0 {
		t.Errorf("counter's PTTL %v after grants; want its 7-day expiry", ttl)
	}
}
