package redisnx

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// inspectCaps: Redis keeps an exclusive grant's token (the counter, or a
// named owner's holds) and every grant's expiry, but no reader's or
// permit's token and no grant time; this driver's queue records arrivals.
var inspectCaps = &drivertest.InspectCaps{Tokens: true, Remaining: true, Waiters: true, WaiterSince: true}

// Dump lists every Redis name of key (found with SCAN on the node of its
// slot: the lock key, counter, queue, entries, readers, holds, permits,
// tombstones) with its serialized value (DUMP, which leaves out the
// expiry).
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	return redistest.Dump(ctx, h.raw, lockKey(DefaultPrefix, key))
}

// What Inspect reads of a key it did not grant, or whose grants are past:
// a plain SET NX lock (redsync's, redislock's) is a foreign holder with
// its value and PTTL, one without expiry has NoExpiry; a counter lost
// leaves the holder's token unknown; "R" whose shares all expired, and a
// dead waiter's entry, show nobody and stay as they are.
func TestInspectForeignAndStale(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := tctx(t, 30*time.Second)
		l := newTestLocker(t, c, nil)
		k := testKey(t)
		lk := lockKey(DefaultPrefix, k)
		inspect := func() *lock.KeyState {
			t.Helper()
			st, err := l.Inspect(ctx, k)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			return st
		}

		c.Set(ctx, lk, "redsync-value", 5*time.Second)
		st := inspect()
		if len(st.Holders) != 1 || !st.Holders[0].Foreign || st.Holders[0].Owner != "redsync-value" || st.Holders[0].Token != 0 ||
			st.Holders[0].Remaining <= 0 || st.Holders[0].Remaining > 5*time.Second || !st.Unknown.Tokens {
			t.Errorf("a plain SET NX lock: %+v, unknown %+v; want a foreign holder with its value and PTTL", st.Holders, st.Unknown)
		}
		c.Set(ctx, lk, "no-expiry", 0)
		if st := inspect(); len(st.Holders) != 1 || st.Holders[0].Remaining != lock.NoExpiry {
			t.Errorf("a lock without expiry: %+v; want Remaining NoExpiry", st.Holders)
		}
		c.Del(ctx, lk)

		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		c.Del(ctx, lk+counterSuffix)
		if st := inspect(); len(st.Holders) != 1 || st.Holders[0].Token != 0 || !st.Unknown.Tokens || st.Holders[0].Foreign {
			t.Errorf("a grant whose counter was lost: %+v, unknown %+v; want its token unknown", st.Holders, st.Unknown)
		}
		lease.Unlock(ctx)

		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		c.Set(ctx, lk, redisx.Readers, 5*time.Second)
		c.ZAdd(ctx, lk+readersSuffix, redis.Z{Score: float64(now.UnixMilli() - 1000), Member: strings.Repeat("a", 32)})
		c.ZAdd(ctx, lk+queueSuffix, redis.Z{Score: float64(now.UnixMicro()), Member: strings.Repeat("b", 32)})
		c.HSet(ctx, lk+entriesSuffix, strings.Repeat("b", 32), fmt.Sprintf("%d 5000 1 %sinbox:x", now.UnixMilli()-1, DefaultPrefix))
		h := &harness{raw: c}
		before, err := h.Dump(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if st := inspect(); st.Held() || len(st.Waiters) > 0 {
			t.Errorf("expired shares and a dead waiter: holders %+v, waiters %+v; want none", st.Holders, st.Waiters)
		}
		if after, err := h.Dump(ctx, k); err != nil || !slices.Equal(before, after) {
			t.Errorf("Inspect changed the key:\nbefore %q\nafter  %q (%v)", before, after, err)
		}
		c.Del(ctx, lk, lk+readersSuffix, lk+queueSuffix, lk+entriesSuffix)
	})
}

func TestParseEntry(t *testing.T) {
	const now = 1000
	for _, tc := range []struct {
		entry string
		want  driver.Waiter
		ok    bool
	}{
		{"2000 30000 4 dlock:inbox:x", driver.Waiter{Mode: driver.Exclusive}, true},
		{"2000 s30000 4 dlock:inbox:x", driver.Waiter{Mode: driver.Shared}, true},
		{"2000 p4/30000 4 dlock:inbox:x", driver.Waiter{Mode: driver.Permit, Limit: 4}, true},
		{"2000 30000 dlock:inbox:x", driver.Waiter{Mode: driver.Exclusive}, true}, // a version without N
		{"999 30000 4 dlock:inbox:x", driver.Waiter{}, false},                     // dead
		{"g1795647753898823", driver.Waiter{}, false},                             // handed the key
		{"", driver.Waiter{}, false},
		{"2000 p0/30000 4 dlock:inbox:x", driver.Waiter{}, false},
		{"2000 x30000 4 dlock:inbox:x", driver.Waiter{}, false},
	} {
		got, ok := parseEntry(tc.entry, now)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseEntry(%q) = %+v, %v; want %+v, %v", tc.entry, got, ok, tc.want, tc.ok)
		}
	}
}
