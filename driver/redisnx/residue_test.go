package redisnx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// residueLocker opens a Locker of this driver on the server at addr.
func residueLocker(t *testing.T, addr string, ttl time.Duration) *lock.Locker {
	t.Helper()
	l, err := lock.Open(context.Background(), Scheme+"://"+addr+"?ttl="+ttl.String())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// useKeyOnce uses key once as the i-th of a mixed workload: an exclusive,
// a shared, a permit's lease and a named owner's two holds released; a
// grant of the dead Locker, left to expire; a wait behind a holder given
// up; a wait of the dead Locker behind a holder, whose lease it returns to
// be released once the dead Locker is cut off.
func useKeyOnce(t *testing.T, live, dead *lock.Locker, i int, key string) *lock.Lease {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var leases []*lock.Lease
	take := func(l *lock.Lease, err error) {
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return
		}
		leases = append(leases, l)
	}
	switch i % 7 {
	case 0:
		take(live.Lock(ctx, key))
	case 1:
		take(live.RLock(ctx, key))
	case 2:
		take(live.Acquire(ctx, key, 3))
	case 3:
		take(live.Lock(ctx, key, lock.WithOwner("job-"+key)))
		take(live.Lock(ctx, key, lock.WithOwner("job-"+key)))
	case 4:
		if _, err := dead.Lock(ctx, key); err != nil {
			t.Errorf("%s: Lock: %v", key, err)
		}
		return nil // the Locker's client is closed below: its grant expires
	case 6:
		holder, err := live.Lock(ctx, key)
		if err != nil {
			t.Errorf("%s: Lock: %v", key, err)
			return nil
		}
		go dead.Lock(context.Background(), key) // ends when the client is closed
		return holder
	case 5:
		take(live.Lock(ctx, key))
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := live.Lock(wctx, key)
		wcancel()
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("%s: a wait behind a holder gave %v", key, err)
		}
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock: %v", key, err)
		}
	}
	return nil
}

// TestAudit38KeysUsedOnceLeaveExpiringKeys: 1,000 keys used once
// (released, left to expire, waits given up, waiters that died, permits,
// shared leases, a named owner's holds) leave, once the dead Locker's grants expired, only
// Redis keys that expire by themselves (fencing counters, tombstones):
// every key SCAN finds has a TTL, none longer than the counters' 7 days.
func TestAudit38KeysUsedOnceLeaveExpiringKeys(t *testing.T) {
	addr := testserver.StartRedis(t, nil).Addr()
	live := residueLocker(t, addr, 5*time.Second)
	dead := residueLocker(t, addr, time.Second)
	const n, workers = 1000, 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held []*lock.Lease // keys the dead Locker waits for
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if l := useKeyOnce(t, live, dead, i, fmt.Sprintf("audit38-once-%d", i)); l != nil {
					mu.Lock()
					held = append(held, l)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	time.Sleep(time.Second) // the dead Locker's waits are queued
	var c redis.UniversalClient
	if !dead.As(&c) {
		t.Fatal("no client")
	}
	c.Close() // the dead Locker's traffic stops; nothing is released
	for _, l := range held {
		if err := l.Unlock(context.Background()); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
	if err := live.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The dead grants' 1 s TTL, a dead waiter's entry's 3 s, and margin.
	time.Sleep(5 * time.Second)
	raw := redis.NewClient(&redis.Options{Addr: addr})
	defer raw.Close()
	ctx := context.Background()
	kinds := map[string]int{}
	longest := map[string]time.Duration{}
	var total, forever int
	iter := raw.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		total++
		ttl, err := raw.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		kinds[residueKind(k)]++
		longest[residueKind(k)] = max(longest[residueKind(k)], ttl)
		switch {
		case ttl == -2: // expired since the scan
		case ttl < 0:
			forever++
			if forever <= 10 {
				t.Errorf("key %q has no TTL", k)
			}
		case ttl > 7*24*time.Hour+time.Minute:
			t.Errorf("key %q expires in %v", k, ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys used once left %d Redis keys (%d without a TTL); by the name's last part: %v, the longest TTL of each: %v", n, total, forever, kinds, longest)
	if forever > 0 {
		t.Errorf("%d Redis keys without a TTL", forever)
	}
}

// residueKind is the kind of the Redis name k, P{K}:KIND[:...] (fence,
// void, ...), or k itself for another name.
func residueKind(k string) string {
	_, rest, ok := strings.Cut(k, "}:")
	if !ok {
		return k
	}
	kind, _, _ := strings.Cut(rest, ":")
	return kind
}
