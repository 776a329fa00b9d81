package redisnx

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// acquire.lua and release.lua get only the lock key and make the other
// names in Lua. As a user allowed only the package doc's rules: a queued
// waiter is handed the key by a release; a clean-up release (Token 0)
// leaves the tombstone at the name Go's names() gives, and acquire.lua
// then refuses that owner; the queue acquire.lua checks is the one
// wait.lua fills. Nothing is refused by the ACL on the way.
func TestAudit31LuaNamesUnderACL(t *testing.T) {
	rules := redisacl.DocRules(t, "doc.go")
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-a31", ACLRules: rules})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	user := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: srv.Username, Password: srv.Password})
	defer user.Close()
	ctx := context.Background()

	a := newTestLocker(t, user, nil)
	b := newTestLocker(t, user, nil)
	k := testKey(t)
	n := names(DefaultPrefix, k, ownerA)

	// Hand-over to a queued waiter.
	la, err := a.Lock(tctx(t, 5*time.Second), k)
	if err != nil {
		t.Fatalf("Lock as the restricted user: %v", err)
	}
	got := make(chan error, 1)
	var lb *lock.Lease
	go func() {
		var err error
		lb, err = b.Lock(tctx(t, 10*time.Second), k)
		got <- err
	}()
	waitQueued(t, admin, n[0], 1)
	if n[3] != n[0]+queueSuffix {
		t.Fatalf("names(): queue %q is not the lock key %q + %q", n[3], n[0], queueSuffix)
	}
	// TryLock (acquire.lua) must see the queue wait.lua filled and yield.
	if l, err := a.TryLock(tctx(t, 5*time.Second), k); err == nil {
		l.Unlock(ctx)
		t.Fatalf("TryLock granted while held")
	}
	start := time.Now()
	if err := la.Unlock(tctx(t, 5*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("queued waiter after the release: %v", err)
		}
		t.Logf("hand-over took %v", time.Since(start))
		if d := time.Since(start); d > time.Second {
			t.Errorf("hand-over took %v: release.lua did not wake the queue wait.lua made", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatalf("the queued waiter was not handed the key 8 s after the release")
	}
	// Queue entries cleaned up after the hand-over (names built in Lua
	// are those wait.lua used).
	if c := admin.ZCard(ctx, n[3]).Val(); c != 0 {
		t.Errorf("queue %s has %d entries after the hand-over", n[3], c)
	}
	if err := lb.Unlock(tctx(t, 5*time.Second)); err != nil {
		t.Fatalf("Unlock of the handed-over lease: %v", err)
	}
	if e := admin.Exists(ctx, n[0]).Val(); e != 0 {
		t.Errorf("lock key still exists after the last Unlock")
	}

	// A lost-reply clean-up: Release with Token 0 leaves the tombstone
	// at names()'s void name, and acquire.lua refuses that owner.
	d := testDriver(user)
	k2 := testKey(t)
	n2 := names(DefaultPrefix, k2, ownerA)
	l := newLease(k2, ownerA, 10*time.Second)
	if err := d.Release(ctx, l); err == nil {
		t.Logf("clean-up release reported held")
	}
	if e := admin.Exists(ctx, n2[2]).Val(); e != 1 {
		keys := admin.Keys(ctx, "*"+k2+"*").Val()
		t.Fatalf("no tombstone at %q after a clean-up release; keys of %s: %q", n2[2], k2, keys)
	}
	l2 := newLease(k2, ownerA, 10*time.Second)
	err = d.Acquire(ctx, l2)
	t.Logf("late acquire of the cleaned-up owner: %v", err)
	if err == nil {
		t.Errorf("acquire.lua granted an owner whose clean-up left a tombstone")
	}
	if e := admin.Exists(ctx, n2[0]).Val(); e != 0 {
		t.Errorf("the lock key exists after the late acquire of a voided owner")
	}
	// Another owner is granted, with a fencing token from names()'s counter.
	l3 := newLease(k2, ownerB, 10*time.Second)
	if err := d.Acquire(ctx, l3); err != nil {
		t.Fatalf("acquire of another owner: %v", err)
	}
	if v, err := admin.Get(ctx, n2[1]).Uint64(); err != nil || v != l3.Token {
		t.Errorf("counter %q = %v (%v), lease token %d", n2[1], v, err, l3.Token)
	}
	if err := d.Release(ctx, l3); err != nil {
		t.Errorf("release: %v", err)
	}
	redisacl.AssertNothingRefused(t, admin, srv.Username)
}
