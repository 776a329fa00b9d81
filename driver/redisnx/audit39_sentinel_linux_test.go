package redisnx

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// role returns the "role:" line of c's INFO replication.
func role(ctx context.Context, c *redis.Client) string {
	for _, line := range strings.Split(c.Info(ctx, "replication").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			return v
		}
	}
	return ""
}

// TestAudit39SentinelFailoverLanes: a Locker over a Sentinel failover
// client has lanes connected to the primary when Sentinel fails over to
// the replica (SENTINEL FAILOVER: the old primary becomes a replica at
// once). go-redis drops the failover client's own connections to the old
// primary, not the lanes': their next call meets READONLY. Every call
// after the failover must still succeed within a few seconds, its grant on
// the new primary, and a lease held across the failover be renewed there.
// Right after the switch (the failover client has heard of it; Sentinel
// demotes the old primary only ~10s later), a Locker over a new failover
// client and the Locker whose lanes were made before must not both hold
// one key. With lanes on a Sentinel client they did, and the held lease,
// renewed on the old primary, was lost; a Sentinel client now gets no
// lanes (internal/redisx NewLanes), as before lanes.
func TestAudit39SentinelFailoverLanes(t *testing.T) {
	t.Run("redisnx", func(t *testing.T) {
		failoverLanes(t, func(c redis.UniversalClient, o *Options) *lock.Locker { return newTestLocker(t, c, o) })
	})
	t.Run("rediswatch", func(t *testing.T) {
		failoverLanes(t, func(c redis.UniversalClient, o *Options) *lock.Locker {
			l := rediswatch.New(c, o)
			t.Cleanup(func() { l.Close() })
			return l
		})
	})
}

func failoverLanes(t *testing.T, newLocker func(redis.UniversalClient, *Options) *lock.Locker) {
	primary := testserver.StartRedis(t, nil)
	primary.RequireFaults(t)
	host, port, _ := net.SplitHostPort(primary.Addr())
	replica := testserver.StartRedis(t, &testserver.RedisOptions{Args: []string{"--replicaof", host, port}})
	ctx := tctx(t, 120*time.Second)
	oldC := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	newC := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { oldC.Close(); newC.Close() })
	if !eventually(20*time.Second, func() bool {
		return strings.Contains(newC.Info(ctx, "replication").Val(), "master_link_status:up")
	}) {
		t.Fatal("the replica never synced")
	}
	sentinel := startSentinel(t, "audit39", primary.Addr(), nil)
	s := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	t.Cleanup(func() { s.Close() })
	if !eventually(30*time.Second, func() bool {
		rs, err := s.Replicas(ctx, "audit39").Result()
		return err == nil && len(rs) == 1 && !strings.Contains(rs[0]["flags"], "down") && !strings.Contains(rs[0]["flags"], "disconnected")
	}) {
		t.Skip("Sentinel did not find the replica in 30s")
	}
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "audit39", SentinelAddrs: []string{sentinel}, PoolSize: 4})
	t.Cleanup(func() { fc.Close() })
	l := newLocker(fc, &Options{Options: lock.Options{TTL: 10 * time.Second}})
	base := testKey(t)
	// Open every lane: four calls at once, a few times.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				le, err := l.TryLock(ctx, fmt.Sprintf("%s/warm/%d/%d", base, g, i))
				if err != nil {
					t.Errorf("before the failover: %v", err)
					return
				}
				le.Unlock(ctx)
			}
		}()
	}
	wg.Wait()
	held, err := l.TryLock(ctx, base+"/held")
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return newC.Exists(ctx, lockKey(DefaultPrefix, base+"/held")).Val() == 1 }) {
		t.Fatal("the held grant did not reach the replica")
	}
	if err := s.Failover(ctx, "audit39").Err(); err != nil {
		t.Skipf("SENTINEL FAILOVER: %v", err)
	}
	start := time.Now()
	if !eventually(30*time.Second, func() bool {
		a, err := s.GetMasterAddrByName(ctx, "audit39").Result()
		return err == nil && net.JoinHostPort(a[0], a[1]) == replica.Addr() && role(ctx, newC) == "master"
	}) {
		t.Fatal("the failover did not happen in 30s")
	}
	t.Logf("failover after %v; old primary's role %q", time.Since(start).Round(time.Millisecond), role(ctx, oldC))
	// Right after the switch, while the old primary is still a primary: a
	// Locker over a new failover client and the Locker with lanes made
	// before the switch try the same key.
	time.Sleep(500 * time.Millisecond) // the clients hear +switch-master
	fc2 := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "audit39", SentinelAddrs: []string{sentinel}})
	t.Cleanup(func() { fc2.Close() })
	l2 := newLocker(fc2, &Options{Options: lock.Options{TTL: 10 * time.Second}})
	k := base + "/split"
	if fc.Ping(ctx).Err() != nil || fc.Set(ctx, base+"/base-client", "1", time.Minute).Err() != nil {
		t.Fatal("the failover client's own pool cannot write")
	}
	t.Logf("the failover client's own pool wrote to the new primary: %v, to the old: %v",
		newC.Exists(ctx, base+"/base-client").Val() == 1, oldC.Exists(ctx, base+"/base-client").Val() == 1)
	le2, err2 := l2.TryLock(ctx, k)
	var les []*lock.Lease
	for range 4 { // every lane
		if le, err := l.TryLock(ctx, k); err == nil {
			les = append(les, le)
		}
	}
	if err2 == nil && len(les) > 0 {
		t.Errorf("two holders of %s after the failover: the new client's token %d (on the new primary: %v) and the lanes' %d (on the old primary: %v, role %q)",
			k, le2.Token(), newC.Exists(ctx, lockKey(DefaultPrefix, k)).Val() == 1, les[0].Token(),
			oldC.Exists(ctx, lockKey(DefaultPrefix, k)).Val() == 1, role(ctx, oldC))
	}
	if !eventually(20*time.Second, func() bool { return role(ctx, oldC) == "slave" }) {
		t.Logf("the old primary is still %q", role(ctx, oldC))
	}
	after := time.Now()
	var mu sync.Mutex
	var fails []string
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				k := fmt.Sprintf("%s/after/%d/%d", base, g, i)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				le, err := l.TryLock(cctx, k)
				cancel()
				if err != nil {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("TryLock %d/%d %v after the failover: %v", g, i, time.Since(after).Round(time.Millisecond), err))
					mu.Unlock()
					continue
				}
				if newC.Get(ctx, lockKey(DefaultPrefix, k)).Val() == "" {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("grant %s not on the new primary", k))
					mu.Unlock()
				}
				if err := le.Unlock(ctx); err != nil {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("Unlock %d/%d: %v", g, i, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	t.Logf("20 TryLock+Unlock after the failover in %v", time.Since(after).Round(time.Millisecond))
	if err := held.Refresh(ctx, 10*time.Second); err != nil {
		t.Errorf("Refresh of a lease held across the failover: %v", err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Errorf("Unlock of a lease held across the failover: %v", err)
	}
}
