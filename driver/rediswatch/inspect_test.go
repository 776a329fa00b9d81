package rediswatch

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// inspectCaps: Redis keeps an exclusive grant's token (the counter, or a
// named owner's holds) and every grant's expiry, but no reader's or
// permit's token and no grant time; this driver's queue (a list) records
// no arrivals.
var inspectCaps = &drivertest.InspectCaps{Tokens: true, Remaining: true, Waiters: true}

// Dump lists every Redis name of key (found with SCAN on the node of its
// slot: the lock key, counter, queue, entries, grant records, readers,
// holds, permits, tombstones) with its serialized value (DUMP, which
// leaves out the expiry).
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	return redistest.Dump(ctx, h.admin, names.LockKey(key))
}

// What Inspect reads of a queue it did not fill: an element whose entry
// died is no waiter; an older version's entry ("") is an exclusive
// waiter; and a plain SET NX lock is a foreign holder. On a Ring too, and
// changing nothing.
func TestInspectQueueAndForeign(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": testserver.SharedRedis(t).Addr()}})
	t.Cleanup(func() { ring.Close() })
	run := func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l, d := newTestLocker(t, rdb, nil)
		k := testKey(t)
		lk := d.LockKey(k)
		dead, old := strings.Repeat("d", 32), strings.Repeat("e", 32)
		rdb.Set(ctx, lk, "redislock-token", 5*time.Second)
		rdb.RPush(ctx, waitQueue(lk), dead+" "+DefaultPrefix+"inbox:x", old)
		rdb.Set(ctx, waitEntry(lk, old), "", 3*time.Second)
		h := &harness{admin: rdb}
		before, err := h.Dump(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		st, err := l.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) != 1 || !st.Holders[0].Foreign || st.Holders[0].Owner != "redislock-token" || st.Holders[0].Remaining <= 0 {
			t.Errorf("holders %+v; want the plain lock, foreign", st.Holders)
		}
		if len(st.Waiters) != 1 || st.Waiters[0].Owner != old || st.Waiters[0].Mode != lock.Exclusive || !st.Unknown.Since {
			t.Errorf("waiters %+v (unknown %+v); want the older version's waiter alone, exclusive, no Since", st.Waiters, st.Unknown)
		}
		if after, err := h.Dump(ctx, k); err != nil || !slices.Equal(before, after) {
			t.Errorf("Inspect changed the key:\nbefore %q\nafter  %q (%v)", before, after, err)
		}
		rdb.Del(ctx, lk, waitQueue(lk), waitEntry(lk, old))
	}
	clients(t, run)
	t.Run("ring", func(t *testing.T) { run(t, ring) })
}

func TestParseEntry(t *testing.T) {
	for _, tc := range []struct {
		entry string
		want  driver.Waiter
		ok    bool
	}{
		{"30000 4", driver.Waiter{Mode: driver.Exclusive}, true},
		{"s30000 4", driver.Waiter{Mode: driver.Shared}, true},
		{"p4:30000 4", driver.Waiter{Mode: driver.Permit, Limit: 4}, true},
		{"", driver.Waiter{Mode: driver.Exclusive}, true}, // an older version's
		{"30000", driver.Waiter{}, false},
		{"p:30000 4", driver.Waiter{}, false},
		{"x30000 4", driver.Waiter{}, false},
	} {
		got, ok := parseEntry(tc.entry)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseEntry(%q) = %+v, %v; want %+v, %v", tc.entry, got, ok, tc.want, tc.ok)
		}
	}
}
