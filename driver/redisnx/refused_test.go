package redisnx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// TestListsRefusedOnlyByACL: grant lists are turned off by the server's
// ACL refusal only, not by another error reply or a failed call.
func TestListsRefusedOnlyByACL(t *testing.T) {
	var rules []string
	for _, r := range redisacl.DocRules(t, "doc.go") {
		if r != "+rpush" && r != "+llen" && r != "+blpop" {
			rules = append(rules, r)
		}
	}
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-nolist", ACLRules: rules})
	uc := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: srv.Username, Password: srv.Password})
	t.Cleanup(func() { uc.Close() })
	ctx := tctx(t, 10e9)
	uc.Set(ctx, "dlock:s", "v", 0)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for name, err := range map[string]error{
		"WRONGTYPE":   admin.LLen(ctx, "dlock:s").Err(),
		"cancelled":   uc.LLen(cancelled, "dlock:l").Err(),
		"closed":      redis.ErrClosed,
		"wrapped ctx": errors.Join(context.DeadlineExceeded),
		"nil":         nil,
	} {
		var ls lists
		if ls.refused(err) || ls.off.Load() {
			t.Errorf("%s (%v): taken for a refusal", name, err)
		}
	}
	var ls lists
	err := uc.LLen(ctx, "dlock:l").Err()
	if !ls.refused(nil, err) || !ls.off.Load() {
		t.Fatalf("NOPERM (%v): not taken for a refusal", err)
	}
}

// prevRules starts a server with a user of the previous release's ACL
// rules (doc.go's without +rpush +llen +blpop), and returns that user's
// client and the default user's.
func prevRules(t *testing.T) (old, full *redis.Client) {
	var rules []string
	for _, r := range redisacl.DocRules(t, "doc.go") {
		if r != "+rpush" && r != "+llen" && r != "+blpop" {
			rules = append(rules, r)
		}
	}
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-prev", ACLRules: rules})
	old = redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: srv.Username, Password: srv.Password})
	full = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { old.Close(); full.Close() })
	return old, full
}

// TestRefusedPushWakes: during an upgrade, a holder whose user lacks
// +rpush hands the key to a waiter that blocks on its grant list (another
// user, with the new rules). release.lua's push is refused after the
// hand-over's writes: the script must not fail (the Unlock would report
// an error for a release that happened) and wakes the waiter on its inbox
// instead, whose next step finds the key its own.
func TestRefusedPushWakes(t *testing.T) {
	for _, inline := range []bool{true, false} {
		t.Run(map[bool]string{true: "inline", false: "follow-up"}[inline], func(t *testing.T) {
			old, full := prevRules(t)
			ctx := tctx(t, 30e9)
			holder, waiter := newTestLocker(t, old, nil), newTestLocker(t, full, nil)
			if !inline {
				waiter = lock.New(testDriver(full), nil)
				t.Cleanup(func() { waiter.Close() })
			}
			k := testKey(t)
			h, err := holder.TryLock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			ch := lockAsync(ctx, waiter, k)
			queuedN(t, full, k, 1)
			time.Sleep(300 * time.Millisecond) // blocked on its list
			start := time.Now()
			if err := h.Unlock(ctx); err != nil {
				t.Errorf("Unlock by a user refused RPUSH: %v", err)
			}
			select {
			case r := <-ch:
				if r.err != nil || r.le.Token() <= h.Token() {
					t.Fatalf("waiter: %v, token %d after %d", r.err, r.le.Token(), h.Token())
				}
				t.Logf("granted %v after the Unlock", r.at.Sub(start).Round(time.Millisecond))
				r.le.Unlock(ctx)
			case <-time.After(3 * time.Second):
				t.Fatal("waiter not granted within 3s")
			}
		})
	}
}
