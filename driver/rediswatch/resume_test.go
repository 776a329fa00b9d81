package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// A Resume with a TTL shorter than what the grant has left changes no
// expiry: not the lock key's, nor a share's or a permit's member and its
// set, on servers with PEXPIRE's GT and on those without (the watched
// transaction). The Lease whose handle is resumed counts on them.
func TestResumeNeverShortens(t *testing.T) {
	testNeverShortens(t, "Resume", func(ctx context.Context, d *watchDriver, first *driver.Lease) error {
		resumed := *first
		resumed.TTL, resumed.Data = time.Second, nil
		return d.Resume(ctx, &resumed)
	})
}

// Neither does a refresh, one at a time or in a batch: the grant may be
// held by two Leases (one resumed it), and the one with the shorter TTL
// must not cut short what the other counts on.
func TestRefreshNeverShortens(t *testing.T) {
	testNeverShortens(t, "Refresh", func(ctx context.Context, d *watchDriver, first *driver.Lease) error {
		_, err := d.Refresh(ctx, first, time.Second)
		return err
	})
	testNeverShortens(t, "RefreshBatch", func(ctx context.Context, d *watchDriver, first *driver.Lease) error {
		// Two exclusive leases make the batch's own transaction.
		other := &driver.Lease{Key: first.Key + "/other", Owner: owner(), Mode: first.Mode, Limit: first.Limit, TTL: time.Minute}
		if err := d.Acquire(ctx, other); err != nil {
			return err
		}
		defer d.Release(ctx, other)
		_, errs := d.RefreshBatch(ctx, []*driver.Lease{first, other}, time.Second)
		return errors.Join(errs...)
	})
}

// testNeverShortens grants a 30 s lease of each mode, calls extend (which
// asks for 1 s) twice (the second after the driver fell back, if PEXPIRE's
// GT is refused), and checks that every expiry is still about 30 s.
func testNeverShortens(t *testing.T, name string, extend func(ctx context.Context, d *watchDriver, first *driver.Lease) error) {
	for _, gtRefused := range []bool{false, true} {
		for _, mode := range []driver.Mode{driver.Exclusive, driver.Shared, driver.Permit} {
			if gtRefused && mode == driver.Exclusive {
				continue // exclusive grants take no GT
			}
			t.Run(fmt.Sprintf("%s/%s/gtRefused=%v", name, mode, gtRefused), func(t *testing.T) {
				ctx := testCtx(t)
				rdb := standalone(t)
				if gtRefused {
					addHook(rdb, expireGTRefused{})
				}
				d := testDriver(rdb, DefaultPrefix)
				t.Cleanup(func() { d.Close() })
				k := testKey(t)
				lk := d.LockKey(k)
				limit := 0
				if mode == driver.Permit {
					limit = 2
				}
				first := &driver.Lease{Key: k, Owner: owner(), Mode: mode, Limit: limit, TTL: 30 * time.Second}
				if err := d.Acquire(ctx, first); err != nil {
					t.Fatal(err)
				}
				for i := range 2 {
					if err := extend(ctx, d, first); err != nil {
						t.Fatalf("%s %d: %v", name, i, err)
					}
				}
				if gtRefused && !d.noExpireGT.Load() {
					t.Errorf("the driver did not fall back to the watched transaction")
				}
				names := []string{lk}
				if mode != driver.Exclusive {
					set := memberKindOf(first).set(lk)
					names = append(names, set)
					now, _ := rdb.Time(ctx).Result()
					score, err := rdb.ZScore(ctx, set, first.Owner).Result()
					if left := time.Duration(int64(score)-now.UnixMilli()) * time.Millisecond; err != nil || left < 29*time.Second {
						t.Errorf("the member expires in %v (%v) after a 1s %s of a 30s grant; want no shorter than it was", left, err, name)
					}
				}
				for _, n := range names {
					if pttl := rdb.PTTL(ctx, n).Val(); pttl < 29*time.Second {
						t.Errorf("%s: PTTL %v after a 1s %s of a 30s grant; want no shorter than it was", n, pttl, name)
					}
				}
				if err := d.Release(ctx, first); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
