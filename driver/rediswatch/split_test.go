package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// batchLeases acquires n exclusive leases with a TTL of ttl through d.
func batchLeases(t *testing.T, d *watchDriver, n int, ttl time.Duration) []*driver.Lease {
	t.Helper()
	ctx := testCtx(t)
	ls := make([]*driver.Lease, n)
	for i := range ls {
		ls[i] = &driver.Lease{Key: testKey(t), Owner: owner(), TTL: ttl}
		if err := d.Acquire(ctx, ls[i]); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
	}
	t.Cleanup(func() {
		for _, l := range ls {
			d.Release(context.Background(), l)
		}
	})
	return ls
}

// A batch refresh whose transaction is aborted by one key that changes
// whenever a transaction watches it is split (that key's half, its
// quarter, ...), so that the key costs about 2·log2(n) transactions more,
// not one per lease: the other leases are refreshed, and only that one
// fails (its Refresh gives up after MaxAttempts aborted transactions).
// Before, an aborted batch fell back to one Refresh per lease.
func TestAudit38AbortedBatchSplits(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, "dlock-test{split}:") // one slot on a Cluster
		t.Cleanup(func() { d.Close() })
		const n = 64
		ls := batchLeases(t, d, n, 2*time.Second)
		const hot = 37
		hotKey := d.LockKey(ls[hot].Key)
		var txs atomic.Int32
		touch := func(op, lk string) {
			txs.Add(1)
			// Any transaction that watches the hot key is aborted.
			rdb.PExpire(context.Background(), hotKey, 2*time.Second)
		}
		d.beforeExec.Store(&touch)
		_, errs := d.RefreshBatch(ctx, ls, time.Minute)
		d.beforeExec.Store(nil)
		for i, err := range errs {
			if i == hot {
				if !errors.Is(err, ErrConflict) {
					t.Errorf("the hot lease: err = %v, want ErrConflict", err)
				}
				continue
			}
			if err != nil {
				t.Errorf("lease %d: %v", i, err)
			}
			if pttl := rdb.PTTL(ctx, d.LockKey(ls[i].Key)).Val(); pttl < 50*time.Second {
				t.Errorf("lease %d: PTTL %v after a refresh to 1m", i, pttl)
			}
		}
		// The whole batch, then two halves at each of log2(n) levels, then
		// the hot lease's Refresh, MaxAttempts times.
		most := int32(1 + 2*bits.Len(n) + MaxAttempts)
		if got := txs.Load(); got > most {
			t.Errorf("%d transactions for a batch of %d with one key changing; want at most %d", got, n, most)
		}
		t.Logf("%d transactions, %d aborted batches", txs.Load(), d.stats.batchFallbacks.Load())
	})
}

// A batch refresh never shortens a key that lasts longer than the TTL
// (another Lease of the grant may count on it), extends the others, and
// reports a key held by another owner as not held; on Redis 7 with
// PEXPIRE's GT option, without reading PTTLs, and on a server that refuses
// GT with them (the driver records the refusal).
func TestAudit38BatchExtendsOnly(t *testing.T) {
	for _, refuse := range []string{"", "queued", "atExec"} {
		t.Run(fmt.Sprintf("gtRefused=%q", refuse), func(t *testing.T) {
			ctx := testCtx(t)
			rec := &recorder{}
			rdb := recorded(t, standalone(t), rec)
			if refuse != "" {
				addHook(rdb, expireGTRefused{atExec: refuse == "atExec"})
			}
			d := testDriver(rdb, DefaultPrefix)
			t.Cleanup(func() { d.Close() })
			ls := batchLeases(t, d, 4, 2*time.Second)
			long, stolen := d.LockKey(ls[1].Key), d.LockKey(ls[2].Key)
			rdb.PExpire(ctx, long, time.Hour)
			rdb.Set(ctx, stolen, "foreign", time.Minute)
			for round := range 2 {
				rec.take()
				ttl := time.Duration(20+5*round) * time.Second // longer each round
				_, errs := d.RefreshBatch(ctx, ls, ttl)
				trips := rec.take()
				for i, err := range errs {
					if want := i == 2; errors.Is(err, driver.ErrNotHeld) != want || (!want && err != nil) {
						t.Errorf("round %d: lease %d: err = %v", round, i, err)
					}
				}
				for i, l := range ls {
					pttl := rdb.PTTL(ctx, d.LockKey(l.Key)).Val()
					switch i {
					case 1:
						if pttl < 59*time.Minute {
							t.Errorf("round %d: a key lasting 1h has PTTL %v after a refresh to 20s", round, pttl)
						}
					case 2:
						if v := rdb.Get(ctx, stolen).Val(); v != "foreign" || pttl > time.Minute {
							t.Errorf("round %d: the stolen key holds %q for %v", round, v, pttl)
						}
					default:
						if pttl < ttl-time.Second {
							t.Errorf("round %d: lease %d: PTTL %v after a refresh to %v", round, i, pttl, ttl)
						}
					}
				}
				want := []string{"watch mget", "multi pexpire pexpire pexpire exec"}
				if refuse != "" {
					want = []string{"watch mget pttl pttl pttl pttl", "multi pexpire pexpire exec"}
					if round == 0 && len(trips) == 5 {
						trips = trips[3:] // the refused transaction and its UNWATCH first
					}
				}
				if fmt.Sprint(trips) != fmt.Sprint(want) {
					t.Errorf("round %d: round trips %q, want %q", round, trips, want)
				}
			}
			if d.noExpireGT.Load() != (refuse != "") {
				t.Errorf("noExpireGT = %v", d.noExpireGT.Load())
			}
		})
	}
}

// A batch refresh watches at most maxWatchKeys keys per transaction
// (WATCH costs the server time in the square of its keys), and runs its
// transactions side by side: 250 leases take three.
func TestAudit38BatchWatchesFewKeys(t *testing.T) {
	ctx := testCtx(t)
	rec := &recorder{}
	rdb := recorded(t, standalone(t), rec)
	d := testDriver(rdb, DefaultPrefix)
	t.Cleanup(func() { d.Close() })
	ls := batchLeases(t, d, 250, 10*time.Second)
	rec.take()
	_, errs := d.RefreshBatch(ctx, ls, 20*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Errorf("lease %d: %v", i, err)
		}
	}
	var watches, most int
	for _, trip := range rec.take() {
		if strings.HasPrefix(trip, "watch mget") {
			watches++
		}
		most = max(most, strings.Count(trip, "pexpire"))
	}
	if watches != 3 || most > maxWatchKeys {
		t.Errorf("%d transactions for 250 leases, the largest with %d keys; want 3 of at most %d", watches, most, maxWatchKeys)
	}
}
