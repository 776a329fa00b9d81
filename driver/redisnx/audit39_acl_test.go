package redisnx

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// commands returns the server's total_commands_processed.
func commands(ctx context.Context, c *redis.Client) int64 {
	for _, line := range strings.Split(c.Info(ctx, "stats").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// TestAudit39PreviousACLRules: a deployment upgraded with the ACL rules
// the previous release documented (the doc's rules without +rpush +llen
// +blpop, which grant lists need). Waiters of that user must still be
// granted in turn, each hand-over prompt, and a waiter must not spin: over
// two seconds of waiting, the server runs a few commands per waiter, not
// hundreds; and Unlock must not fail. Before the fallback (refused.go,
// prelude.lua's push) the waiters spun (42,814 commands in 2s for 3
// waiters), every Unlock that handed over failed (RPUSH refused inside
// release.lua, after the hand-over's writes), and with the inline steps a
// blocking Lock failed at once with NOPERM on LLEN.
// Both kinds of wait are run: inline steps (a *redis.Client's lanes) and
// the follow-up's goroutine (list.go, as over a Cluster).
func TestAudit39PreviousACLRules(t *testing.T) {
	for _, inline := range []bool{true, false} {
		t.Run(map[bool]string{true: "inline", false: "follow-up"}[inline], func(t *testing.T) {
			testPreviousACLRules(t, inline)
		})
	}
}

func testPreviousACLRules(t *testing.T, inline bool) {
	var rules []string
	for _, r := range redisacl.DocRules(t, "doc.go") {
		if r != "+rpush" && r != "+llen" && r != "+blpop" {
			rules = append(rules, r)
		}
	}
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-prev", ACLRules: rules})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	uc := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: srv.Username, Password: srv.Password})
	t.Cleanup(func() { uc.Close() })
	ctx := tctx(t, 60*time.Second)
	holder, waiters := newTestLocker(t, uc, nil), newTestLocker(t, uc, nil)
	if !inline {
		d := testDriver(uc)
		waiters = lock.New(d, nil)
		t.Cleanup(func() { waiters.Close() })
	}
	k := testKey(t)
	h, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var res []<-chan lockResult
	for i := range 3 {
		ch := lockAsync(ctx, waiters, k)
		res = append(res, ch)
		time.Sleep(300 * time.Millisecond)
		for j, ch := range res {
			select {
			case r := <-ch:
				t.Fatalf("waiter %d of %d: Lock returned %v while the key is held (queue %v, ACL LOG %v)", j, i, r.err,
					admin.ZRange(ctx, lockKey(DefaultPrefix, k)+queueSuffix, 0, -1).Val(), aclLog(ctx, admin))
			default:
			}
		}
		queuedN(t, admin, k, int64(i+1))
	}
	time.Sleep(500 * time.Millisecond)
	c0 := commands(ctx, admin)
	time.Sleep(2 * time.Second)
	n := commands(ctx, admin) - c0
	t.Logf("3 waiters, 2s: %d commands", n)
	if n > 100 {
		t.Errorf("3 waiters ran %d commands in 2s: they spin", n)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Errorf("Unlock with the previous rules: %v", err)
	}
	prev := h.Token()
	for i, ch := range res {
		start := time.Now()
		select {
		case r := <-ch:
			if r.err != nil || r.le.Token() <= prev {
				t.Fatalf("waiter %d: %v, token %d after %d", i, r.err, r.le.Token(), prev)
			}
			t.Logf("waiter %d granted after %v", i, time.Since(start).Round(time.Millisecond))
			prev = r.le.Token()
			if err := r.le.Unlock(ctx); err != nil {
				t.Errorf("waiter %d's Unlock: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d not granted within 5s", i)
		}
	}
}

// aclLog returns the commands the ACL LOG shows refused.
func aclLog(ctx context.Context, c *redis.Client) []string {
	var out []string
	for _, e := range c.ACLLog(ctx, 10).Val() {
		out = append(out, e.Reason+" "+e.Object+" "+e.Context)
	}
	return out
}
