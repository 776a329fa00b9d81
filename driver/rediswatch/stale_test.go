package rediswatch

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A marker whose members all expired is free for an exclusive attempt:
// releases do not shorten the lock key's PX, so after a long member was
// released and a short one's holder crashed, the key still holds the
// marker for the long member's PX, and a writer must not wait for it.
func TestStaleMarkerFreeForWriter(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, kind := range []string{"permits", "readers"} {
			t.Run(kind, func(t *testing.T) {
				l, _ := newTestLocker(t, rdb, nil)
				// The crashing holder has a client of its own, closed once
				// it holds its member: nothing of it reaches the server
				// after that (a live Locker would release an expired
				// member itself).
				crashing := clone(rdb)
				lc, _ := newTestLocker(t, crashing, nil)
				ctx := testCtx(t)
				k := testKey(t)
				take := func(l *lock.Locker, ttl time.Duration) *lock.Lease {
					t.Helper()
					var (
						p   *lock.Lease
						err error
					)
					if kind == "permits" {
						p, err = l.TryAcquire(ctx, k, 3, lock.WithTTL(ttl))
					} else {
						p, err = l.TryRLock(ctx, k, lock.WithTTL(ttl))
					}
					if err != nil {
						t.Fatalf("take %v: %v", ttl, err)
					}
					return p
				}
				long := take(l, 5*time.Second)
				take(lc, 300*time.Millisecond)
				crashing.Close() // the holder crashes: its member is never released nor renewed
				crashed := time.Now()
				if err := long.Unlock(ctx); err != nil {
					t.Fatalf("Unlock: %v", err)
				}
				if pttl := rdb.PTTL(ctx, DefaultPrefix+"{"+k+"}").Val(); pttl < 3*time.Second {
					t.Fatalf("lock key PTTL %v after the long member's release; this test needs the marker to outlive its members", pttl)
				}
				wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				w, err := l.Lock(wctx, k)
				if err != nil {
					t.Fatalf("a writer after every member expired: %v (it waited for the stale marker's PX)", err)
				}
				if d := time.Since(crashed); d < 250*time.Millisecond {
					t.Errorf("the writer got in %v after the crashed member's grant, before its 300ms TTL", d)
				}
				if err := w.Unlock(ctx); err != nil {
					t.Errorf("Unlock of the writer: %v", err)
				}
				if n := rdb.Exists(ctx, DefaultPrefix+"{"+k+"}:s", DefaultPrefix+"{"+k+"}:r").Val(); n != 0 {
					t.Errorf("%d members' sets left after the writer", n)
				}
			})
		}
	})
}

// clone returns a new client like rdb (its own connections).
func clone(rdb redis.UniversalClient) redis.UniversalClient {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return redis.NewClusterClient(c.Options())
	case *redis.Client:
		return redis.NewClient(c.Options())
	}
	panic("unknown client type")
}
