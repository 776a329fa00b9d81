package etcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit38KeysUsedOnce: keys used once (taken and released, some
// through a queued wait) leave on etcd only their counters, each on a
// lease that ends within counterTTL (counter.go), and one lease per
// Locker for them: no entry, and no other lease once the waiting leases
// (waitSeconds) ran out.
func TestAudit38KeysUsedOnce(t *testing.T) {
	e := testserver.StartEtcd(t, nil)
	raw := rawClient(t, e.Endpoints())
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	before, err := raw.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix}, &netCut{})
	b := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix}, &netCut{})
	const keys, queued = 100, 5
	for i := range keys {
		l, err := a.TryLock(ctx, fmt.Sprintf("once-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i < queued {
			// a queued grant too, with a TTL of its own
			granted := make(chan *lock.Lease, 1)
			go func() {
				lb, err := b.Lock(ctx, l.Key(), lock.WithTTL(7*time.Second))
				if err != nil {
					t.Error(err)
				}
				granted <- lb
			}()
			time.Sleep(300 * time.Millisecond)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if l = <-granted; l == nil {
				t.FailNow()
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	b.Close()
	time.Sleep(waitSeconds*time.Second + ExpiryLag)

	resp, err := raw.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	counters := 0
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), prefix)
		if !strings.HasPrefix(k, "c/") {
			t.Errorf("a key used once left %s", kv.Key)
			continue
		}
		counters++
		if kv.Lease == 0 {
			t.Errorf("the counter %s has no lease: it stays for ever", kv.Key)
			continue
		}
		ttl, err := raw.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL <= 0 || ttl.TTL > int64(counterTTL/time.Second) {
			t.Errorf("the counter %s is on a lease with %d s left, want (0, %d]", kv.Key, ttl.TTL, int64(counterTTL/time.Second))
		}
	}
	if counters != keys {
		t.Errorf("%d counters for %d keys", counters, keys)
	}
	after, err := raw.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Leases) - len(before.Leases); n > 2 {
		t.Errorf("%d keys used once by two Lockers left %d leases, want one per Locker for the counters", keys, n)
	}
}
