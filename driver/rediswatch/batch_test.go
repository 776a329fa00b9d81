package rediswatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

func owner() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// RefreshBatch extends every lease still held and reports ErrNotHeld for
// the others; when its transaction is aborted it redoes the leases one at
// a time. On a Cluster it groups leases by slot (here: a prefix with a hash
// tag puts some in one slot, the rest each in its own).
func TestRefreshBatch(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, prefix := range []string{DefaultPrefix, "dlock-test{batch}:"} {
			t.Run(prefix, func(t *testing.T) {
				ctx := testCtx(t)
				d := testDriver(rdb, prefix)
				t.Cleanup(func() { d.Close() })
				ls := make([]*driver.Lease, 5)
				for i := range ls {
					ls[i] = &driver.Lease{Key: testKey(t), Owner: owner(), TTL: 2 * time.Second}
					if err := d.Acquire(ctx, ls[i]); err != nil {
						t.Fatalf("Acquire: %v", err)
					}
				}
				stolen := ls[3]
				if err := rdb.Set(ctx, d.LockKey(stolen.Key), "foreign", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				check := func(what string) {
					t.Helper()
					validity, errs := d.RefreshBatch(ctx, ls, time.Minute)
					if validity != time.Minute {
						t.Errorf("%s: validity %v, want 1m", what, validity)
					}
					for i, err := range errs {
						if i == 3 {
							if !errors.Is(err, driver.ErrNotHeld) {
								t.Errorf("%s: stolen lease: err = %v, want ErrNotHeld", what, err)
							}
							continue
						}
						if err != nil {
							t.Errorf("%s: lease %d: %v", what, i, err)
						}
						if pttl := rdb.PTTL(ctx, d.LockKey(ls[i].Key)).Val(); pttl < 50*time.Second {
							t.Errorf("%s: lease %d: PTTL %v after a refresh to 1m", what, i, pttl)
						}
						rdb.PExpire(ctx, d.LockKey(ls[i].Key), 2*time.Second)
					}
					if v := rdb.Get(ctx, d.LockKey(stolen.Key)).Val(); v != "foreign" {
						t.Errorf("%s: the stolen key now holds %q", what, v)
					}
				}
				check("batch")

				// A watched key changes between WATCH and EXEC, once.
				var runs atomic.Int32
				touch := func(op, lk string) {
					if runs.Add(1) == 1 {
						rdb.PExpire(context.Background(), lk, 2*time.Second)
					}
				}
				d.beforeExec.Store(&touch)
				check("batch with an aborted transaction")
				_, multi := rdb.(*redis.Client)
				multi = multi || prefix != DefaultPrefix
				if s := d.stats.snapshot(d.Notify); multi && s.BatchFallbacks != 1 {
					t.Errorf("BatchFallbacks = %d, want 1", s.BatchFallbacks)
				}
				for _, l := range ls {
					d.Release(ctx, l)
				}
			})
		}
	})
}
