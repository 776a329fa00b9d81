package rediswatch

import (
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
	for _, gtRefused := range []bool{false, true} {
		for _, mode := range []driver.Mode{driver.Exclusive, driver.Shared, driver.Permit} {
			if gtRefused && mode == driver.Exclusive {
				continue // the exclusive Resume takes no GT
			}
			t.Run(fmt.Sprintf("%s/gtRefused=%v", mode, gtRefused), func(t *testing.T) {
				ctx := testCtx(t)
				rdb := standalone(t)
				if gtRefused {
					rdb.AddHook(expireGTRefused{})
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
				resumed := &driver.Lease{Key: k, Owner: first.Owner, Mode: mode, Limit: limit, Token: first.Token, TTL: time.Second}
				for i := range 2 { // the second after the driver fell back, if GT is refused
					if err := d.Resume(ctx, resumed); err != nil {
						t.Fatalf("Resume %d: %v", i, err)
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
						t.Errorf("the member expires in %v (%v) after a 1s Resume of a 30s grant; want no shorter than it was", left, err)
					}
				}
				for _, name := range names {
					if pttl := rdb.PTTL(ctx, name).Val(); pttl < 29*time.Second {
						t.Errorf("%s: PTTL %v after a 1s Resume of a 30s grant; want no shorter than it was", name, pttl)
					}
				}
				if err := d.Release(ctx, first); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
