package redisnx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// residueLocker opens a Locker of this driver on the server at addr.
func residueLocker(t *testing.T, addr string, ttl time.Duration) lock.Locker {
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
// up.
func useKeyOnce(t *testing.T, live, dead lock.Locker, i int, key string) {
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
	switch i % 6 {
	case 0:
		take(live.Lock(ctx, key))
	case 1:
		take(live.(lock.RWLocker).RLock(ctx, key))
	case 2:
		take(live.(lock.SemLocker).Acquire(ctx, key, 3))
	case 3:
		take(live.Lock(ctx, key, lock.WithOwner("job-"+key)))
		take(live.Lock(ctx, key, lock.WithOwner("job-"+key)))
	case 4:
		if _, err := dead.Lock(ctx, key); err != nil {
			t.Errorf("%s: Lock: %v", key, err)
		}
		return // the Locker's client is closed below: its grant expires
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
}

// TestAudit38KeysUsedOnceLeaveExpiringKeys: 1,000 keys used once
// (released, left to expire, waits given up, permits, shared leases, a
// named owner's holds) leave, once the dead Locker's grants expired, only
// Redis keys that expire by themselves (fencing counters, tombstones):
// every key SCAN finds has a TTL, none longer than the counters' 7 days.
func TestAudit38KeysUsedOnceLeaveExpiringKeys(t *testing.T) {
	addr := testserver.StartRedis(t, nil).Addr()
	live := residueLocker(t, addr, 5*time.Second)
	dead := residueLocker(t, addr, time.Second)
	const n, workers = 1000, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				useKeyOnce(t, live, dead, i, fmt.Sprintf("audit38-once-%d", i))
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var c redis.UniversalClient
	if !lock.As(dead, &c) {
		t.Fatal("no client")
	}
	c.Close() // the dead Locker's traffic stops; nothing is released
	if err := live.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	time.Sleep(3 * time.Second) // the dead grants' 1 s TTL, and margin
	raw := redis.NewClient(&redis.Options{Addr: addr})
	defer raw.Close()
	ctx := context.Background()
	kinds := map[string]int{}
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
	t.Logf("%d keys used once left %d Redis keys (%d without a TTL); by the name's last part: %v", n, total, forever, kinds)
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
