package rediswatch

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// A claim grants the waiter only a key that holds its owner, with its
// grant record's token and the key's PTTL as validity, and writes nothing;
// it grants nothing for a key another owner holds, a missing key or
// record, or a key with less than half the TTL left (the full attempt then
// extends it). Each refusal has teeth: a claim without that check grants.
func TestClaim(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		t.Cleanup(func() { d.Close() })
		const owner, other = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
		ttl := time.Minute
		for _, c := range []struct {
			name   string
			holder string        // "" for no lock key
			px     time.Duration // the lock key's
			record string        // "" for none
			want   bool
		}{
			{"handed over", owner, ttl, "1796283723710438", true},
			{"held by another", other, ttl, "1796283723710438", false},
			{"free", "", 0, "1796283723710438", false},
			{"no grant record", owner, ttl, "", false},
			{"grant record not a token", owner, ttl, "x", false},
			{"less than half the TTL left", owner, ttl/2 - time.Second, "1796283723710438", false},
		} {
			t.Run(c.name, func(t *testing.T) {
				k := testKey(t)
				lk := redisx.LockKey(DefaultPrefix, k)
				if c.holder != "" {
					rdb.Set(ctx, lk, c.holder, c.px)
				}
				if c.record != "" {
					rdb.Set(ctx, grantRecord(lk, owner), c.record, time.Minute)
				}
				rdb.RPush(ctx, waitQueue(lk), "next-waiter")
				before := rdb.PTTL(ctx, lk).Val()
				l := &driverLease{Key: k, Owner: owner, TTL: ttl, Data: &waiting{}}
				ok, err := d.claim(ctx, l)
				if err != nil {
					t.Fatal(err)
				}
				if ok != c.want {
					t.Fatalf("claim = %v, want %v", ok, c.want)
				}
				if after := rdb.PTTL(ctx, lk).Val(); after > before {
					t.Errorf("the claim lengthened the lock key from %v to %v", before, after)
				}
				if got := rdb.Get(ctx, lk).Val(); got != c.holder {
					t.Errorf("lock key holds %q after the claim, want %q", got, c.holder)
				}
				if !ok {
					return
				}
				if tok, _ := strconv.ParseUint(c.record, 10, 64); l.Token != tok {
					t.Errorf("token %d, want the grant record's %s", l.Token, c.record)
				}
				if l.Validity > before || l.Validity < ttl/2 {
					t.Errorf("validity %v, want the PTTL read (at most %v)", l.Validity, before)
				}
				if q, _ := l.Data.(fromQueue); q.next != "next-waiter" {
					t.Errorf("Data = %#v, want the waiter behind", l.Data)
				}
			})
		}
	})
}
