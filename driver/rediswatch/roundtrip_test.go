package rediswatch

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// recorder is a go-redis hook that records every round trip (a command or
// a pipeline) with the names of its commands.
type recorder struct {
	mu    sync.Mutex
	trips []string
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(cmd)
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.add(cmds...)
		return next(ctx, cmds)
	}
}

func (r *recorder) add(cmds ...redis.Cmder) {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.FullName()
	}
	r.mu.Lock()
	r.trips = append(r.trips, strings.Join(names, " "))
	r.mu.Unlock()
}

// take returns the round trips recorded since the last call.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trips
	r.trips = nil
	return t
}

// Every operation takes the round trips docs/design.md says ("rediswatch
// transactions"), made of the commands it lists, and no script command
// ever.
func TestRoundTrips(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		rec := &recorder{}
		switch c := rdb.(type) {
		case *redis.Client:
			c.AddHook(rec)
		case *redis.ClusterClient:
			// Transactions run on the node clients.
			c.OnNewNode(func(n *redis.Client) { n.AddHook(rec) })
			c.ReloadState(ctx)
		}
		if err := rdb.Ping(ctx).Err(); err != nil { // connect, load the slot map
			t.Fatal(err)
		}
		l, d := newTestLocker(t, rdb, nil)
		other, _ := newTestLocker(t, rdb, nil)
		k := testKey(t)
		// Warm up: the first grant also seeds the counter, and the Cluster
		// client may still be learning its nodes.
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		lease.Unlock(ctx)
		rec.take()

		check := func(what string, want ...string) {
			t.Helper()
			got := rec.take()
			if !slices.Equal(got, want) {
				t.Errorf("%s: round trips\n  %q\nwant\n  %q", what, got, want)
			}
		}
		lease, err = l.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		check("grant", "watch get get time lrange", "multi set set exec")
		if _, err := other.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryLock on a held key: %v", err)
		}
		check("grant of a held key", "watch get get time lrange", "unwatch pttl")
		if err := lease.Refresh(ctx, lock.DefaultTTL); err != nil {
			t.Fatal(err)
		}
		check("refresh", "watch get", "multi pexpire exec")
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		check("release", "watch get lrange", "multi del publish exec")
		if err := d.Release(ctx, &driverLease{Key: k, Owner: "not-the-owner", Token: 1}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Release by a stranger: %v", err)
		}
		check("release by a stranger", "watch get lrange", "unwatch")
		stray := &driverLease{Key: k, Owner: "not-the-owner", TTL: lock.DefaultTTL, Data: execSent{}}
		if err := d.Release(ctx, stray); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("clean-up Release: %v", err)
		}
		check("clean-up after a lost grant reply", "watch set get lrange", "unwatch")

		if _, ok := rdb.(*redis.Client); ok {
			// A batch refresh covers every lease in two round trips.
			var ls []*lock.Lease
			for range 3 {
				lease, err := l.TryLock(ctx, testKey(t))
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, lease)
			}
			dls := make([]*driverLease, len(ls))
			for i, lease := range ls {
				dls[i] = &driverLease{Key: lease.Key(), Owner: ownerOf(t, rdb, lease.Key())}
			}
			rec.take()
			_, errs := d.RefreshBatch(ctx, dls, lock.DefaultTTL)
			for i, err := range errs {
				if err != nil {
					t.Errorf("RefreshBatch lease %d: %v", i, err)
				}
			}
			check("batch refresh of 3", "watch mget", "multi pexpire pexpire pexpire exec")
		}
	})
}

// ownerOf reads the owner token a lock key holds.
func ownerOf(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), DefaultPrefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatalf("GET lock key of %q: %v", key, err)
	}
	return v
}
