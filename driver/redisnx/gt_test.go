package redisnx

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/redis/go-redis/v9"
)

// calls reads INFO commandstats' calls of each command (those a script
// makes included).
func calls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, g := range regexp.MustCompile(`cmdstat_(\w+):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		m[g[1]], _ = strconv.Atoi(g[2])
	}
	return m
}

// On Redis 7, refresh.lua lengthens an exclusive key with one PEXPIRE ...
// GT, with no PTTL read (a third of the commands it ran per key), and
// still never shortens a key that lasts longer.
func TestAudit38RefreshUsesExpireGT(t *testing.T) {
	srv := testserver.StartRedis(t, nil) // a server of its own: its command counts are this test's
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := tctx(t, 30*time.Second)
	d := testDriver(c)
	t.Cleanup(func() { d.Close() })
	ls := make([]*driver.Lease, 100)
	for i := range ls {
		ls[i] = &driver.Lease{Key: fmt.Sprintf("%s/%d", testKey(t), i), Owner: fmt.Sprintf("%032x", i+1), TTL: 10 * time.Second}
		if err := d.Acquire(ctx, ls[i]); err != nil {
			t.Fatal(err)
		}
	}
	long := d.LockKey(ls[7].Key)
	c.PExpire(ctx, long, time.Hour)
	before := calls(t, c)
	_, errs := d.RefreshBatch(ctx, ls, 20*time.Second)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	after := calls(t, c)
	if n := after["pttl"] - before["pttl"]; n != 0 {
		t.Errorf("%d PTTLs for a batch of 100 exclusive leases; want none", n)
	}
	if n := after["pexpire"] - before["pexpire"]; n != 100 {
		t.Errorf("%d PEXPIREs for a batch of 100 exclusive leases; want 100", n)
	}
	for i, l := range ls {
		pttl := c.PTTL(ctx, d.LockKey(l.Key)).Val()
		if i == 7 && pttl < 59*time.Minute {
			t.Errorf("a key lasting 1h has PTTL %v after a refresh to 20s", pttl)
		}
		if i != 7 && pttl < 19*time.Second {
			t.Errorf("lease %d: PTTL %v after a refresh to 20s", i, pttl)
		}
	}
}
