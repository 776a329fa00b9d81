package redisnx

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A Ring spreads keys over independent servers: grants, wake-ups (one
// pub/sub connection per shard with waiters) and batched refreshes (one
// script per shard) follow each key to its shard.
func TestRing(t *testing.T) {
	addrs := map[string]string{
		"a": testserver.StartRedis(t, nil).Addr(),
		"b": testserver.StartRedis(t, nil).Addr(),
	}
	newRing := func() *redis.Ring {
		r := redis.NewRing(&redis.RingOptions{Addrs: addrs})
		t.Cleanup(func() { r.Close() })
		return r
	}
	ring := newRing()
	holder := newTestLocker(t, ring, nil)
	waiter := newTestLocker(t, newRing(), nil)
	ctx := tctx(t, 30*time.Second)
	base := testKey(t)

	var keys []string
	var held []*lock.Lease
	for i := range 20 {
		k := fmt.Sprintf("%s/%d", base, i)
		l, err := holder.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		keys, held = append(keys, k), append(held, l)
	}
	perShard := map[string]int{}
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		for _, k := range keys {
			if c.Exists(ctx, lockKey(DefaultPrefix, k)).Val() == 1 {
				perShard[addr]++
			}
		}
	}
	if len(perShard) != 2 || perShard[addrs["a"]]+perShard[addrs["b"]] != len(keys) {
		t.Fatalf("keys per shard: %v; want all %d keys, on both shards", perShard, len(keys))
	}

	// Batched refresh through the driver: one script per shard.
	var n counter
	rc := newRing()
	rc.AddHook(&n)
	d := testDriver(rc)
	defer d.Close()
	var dls []*driver.Lease
	for _, k := range keys[:10] {
		dl := newLease(k+"/batch", fmt.Sprintf("%032x", len(dls)+1), 5*time.Second)
		if err := d.Acquire(ctx, dl); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		dls = append(dls, dl)
	}
	loaded := 0
	for _, c := range rc.GetShardClients() {
		refreshScript.Load(ctx, c)
		loaded++
	}
	before := n.cmds.Load()
	if _, errs := d.RefreshBatch(ctx, dls, 30*time.Second); len(errs) != len(dls) {
		t.Fatalf("RefreshBatch: %d results", len(errs))
	} else {
		for i, err := range errs {
			if err != nil {
				t.Errorf("RefreshBatch lease %d: %v", i, err)
			}
		}
	}
	if sent := n.cmds.Load() - before; sent != int64(loaded) {
		t.Errorf("RefreshBatch over %d shards sent %d scripts", loaded, sent)
	}
	for _, dl := range dls {
		if err := d.Release(ctx, dl); err != nil {
			t.Errorf("Release: %v", err)
		}
	}

	// Waiters on every key, woken by the release messages of both shards.
	slow := lock.WithRetry(lock.LinearBackoff(time.Minute))
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := waiter.Lock(ctx, k, slow)
			if err != nil {
				t.Errorf("waiter on %s: %v", k, err)
				return
			}
			l.Unlock(ctx)
		}()
	}
	// Each key's channel has its subscriber on the key's own shard.
	if !eventually(5*time.Second, func() bool {
		for _, k := range keys {
			lk := lockKey(DefaultPrefix, k)
			shard, err := ring.GetShardClientForKey(lk)
			if err != nil {
				return false
			}
			if n := shard.PubSubNumSub(ctx, lk+channelSuffix).Val()[lk+channelSuffix]; n != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the waiters' subscriptions are not on their keys' shards")
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	woken := make(chan struct{})
	go func() { wg.Wait(); close(woken) }()
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatalf("waiters not woken within 5s of the releases")
	}
}
