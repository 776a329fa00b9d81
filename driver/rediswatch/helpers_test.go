package rediswatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

var keySeq atomic.Int64

// testKey returns a key unique to this test run.
func testKey(t *testing.T) string {
	return fmt.Sprintf("rediswatch-test/%d/%s/%d", time.Now().UnixNano(), t.Name(), keySeq.Add(1))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// standalone returns a client of the shared server (default user), closed
// at cleanup.
func standalone(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis(t).Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster returns a client of the shared Cluster, closed at cleanup.
func cluster(t *testing.T) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testserver.SharedRedisCluster(t).Addrs()})
	t.Cleanup(func() { c.Close() })
	return c
}

// clients runs fn with a standalone and a Cluster client.
func clients(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { fn(t, standalone(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, cluster(t)) })
}

// newTestLocker returns a Locker over rdb without auto-renewal, closed at
// cleanup, and its driver.
func newTestLocker(t *testing.T, rdb redis.UniversalClient, o *Options) (*lock.Locker, *watchDriver) {
	if o == nil {
		o = &Options{}
	}
	o.DisableAutoRenew = true
	l, d := newLockerDriver(rdb, o, false)
	t.Cleanup(func() { l.Close() })
	return l, d
}

func stats(t *testing.T, l *lock.Locker) Stats {
	var s Stats
	if !l.As(&s) {
		t.Fatalf("As(*Stats) failed")
	}
	return s
}

type driverLease = driver.Lease

// testDriver is the driver of New(client, &Options{Prefix: prefix}), for
// tests that call it directly.
func testDriver(client redis.UniversalClient, prefix string) *watchDriver {
	core, _ := redisx.NewCore("rediswatch", client, &Options{Prefix: prefix}, false)
	hookLanes(client, core.Lanes)
	return newDriver(core)
}

// laneHooks are the hooks tests put on a client for the lanes of the
// drivers made over it here (redisx.Lanes: the client's own hooks do not
// see the lanes' commands).
var laneHooks struct {
	sync.Mutex
	m map[redis.UniversalClient][]redis.Hook
}

// addHook adds h to c, and to the lanes of the drivers made over c from
// now on (on a Cluster, to their node clients).
func addHook(c redis.UniversalClient, h redis.Hook) {
	if _, ok := c.(*redis.ClusterClient); !ok {
		c.AddHook(h)
	}
	laneHooks.Lock()
	defer laneHooks.Unlock()
	if laneHooks.m == nil {
		laneHooks.m = map[redis.UniversalClient][]redis.Hook{}
	}
	laneHooks.m[c] = append(laneHooks.m[c], h)
}

func hookLanes(c redis.UniversalClient, ls *redisx.Lanes) {
	laneHooks.Lock()
	defer laneHooks.Unlock()
	for _, h := range laneHooks.m[c] {
		if _, ok := c.(*redis.ClusterClient); ok {
			ls.AddNodeHook(h) // transactions run on the node clients
		} else {
			ls.AddHook(h)
		}
	}
}

// newLockerDriver is New, also returning the driver; with owns set, the
// Locker owns its client, as one opened from a URL does.
func newLockerDriver(client redis.UniversalClient, o *Options, owns bool) (*lock.Locker, *watchDriver) {
	core, lo := redisx.NewCore("rediswatch", client, o, owns)
	hookLanes(client, core.Lanes)
	d := newDriver(core)
	return lock.New(d, lo), d
}
