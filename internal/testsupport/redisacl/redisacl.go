// Package redisacl helps the tests of the Redis drivers run them as ACL
// users: it reads the rules a driver's package doc lists, makes users on
// every master of a Cluster, checks the ACL LOG for refusals, and exercises
// every operation on permits. It is for tests only.
package redisacl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// DocRules returns the ACL rules of the "# Permissions" section of the
// package doc in file (a driver's doc.go): the first block of lines
// indented by a tab there, as written, with resetkeys and resetchannels
// before the key and channel patterns (ACL SETUSER adds patterns to those
// a user has, and the users of these tests start from "~* &* +@all"). It
// fails tb unless the rules start with -@all and are at least ten.
func DocRules(tb testing.TB, file string) []string {
	tb.Helper()
	doc, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "// # Permissions\n")
	if !ok {
		tb.Fatalf("%s has no Permissions section", file)
	}
	var rules []string
	for _, line := range strings.Split(rest, "\n") {
		text, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			if len(rules) > 0 {
				break
			}
			continue
		}
		for _, r := range strings.Fields(text) {
			switch r[0] {
			case '~':
				rules = append(rules, "resetkeys")
			case '&':
				rules = append(rules, "resetchannels")
			}
			rules = append(rules, r)
		}
	}
	if len(rules) < 10 || rules[0] != "-@all" {
		tb.Fatalf("rules %q read from %s's Permissions section", rules, file)
	}
	return rules
}

// ClusterUser makes an ACL user, named name and random hex digits, whose
// rules are "reset on >PASSWORD ~* &* +@all" followed by rules, on every
// master of the Cluster behind admin, deleted at cleanup; it returns the
// user's name and password.
func ClusterUser(tb testing.TB, admin *redis.ClusterClient, name string, rules ...string) (user, pass string) {
	tb.Helper()
	user, pass = name+"-"+randHex(4), randHex(12)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := append([]string{"reset", "on", ">" + pass, "~*", "&*", "+@all"}, rules...)
	if err := admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.ACLSetUser(ctx, user, args...).Err()
	}); err != nil {
		tb.Fatalf("ACL SETUSER: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.ACLDelUser(ctx, user).Err()
		})
	})
	return user, pass
}

// ForEachNode runs fn on admin, a client of one server, or on every master
// of the Cluster behind it, and fails tb if that cannot be done.
func ForEachNode(tb testing.TB, ctx context.Context, admin redis.UniversalClient, fn func(ctx context.Context, node *redis.Client) error) {
	tb.Helper()
	var err error
	switch c := admin.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, fn)
	case *redis.Client:
		err = fn(ctx, c)
	default:
		tb.Fatalf("redisacl: %T is neither a *redis.Client nor a *redis.ClusterClient", admin)
	}
	if err != nil {
		tb.Errorf("ForEachMaster: %v", err)
	}
}

// AssertNothingRefused fails tb if the ACL LOG of admin's server, or of
// any master of its Cluster, lists a refusal for user: a command, key or
// channel it was not allowed.
func AssertNothingRefused(tb testing.TB, admin redis.UniversalClient, user string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ForEachNode(tb, ctx, admin, func(ctx context.Context, node *redis.Client) error {
		entries, err := node.ACLLog(ctx, 1000).Result()
		if err != nil {
			tb.Errorf("%s: ACL LOG: %v", node.Options().Addr, err)
		}
		for _, e := range entries {
			if e.Username == user {
				tb.Errorf("%s: %s refused %q to the driver's user (%s) %d time(s)", node.Options().Addr, e.Reason, e.Object, e.Context, e.Count)
			}
		}
		return nil
	})
}

// ExercisePermits runs every operation on permits of one key through a and
// b, Lockers of one driver and server, as the tests of the drivers' ACL
// rules need: a has a TTL of 300ms, so that its permits live on
// renewals. Permits are taken, refused (a third of two, a lock, another
// limit), renewed and refreshed; a permit waiter is queued (waitQueued, if
// not nil, returns once it is in the key's queue, or fails t) and let in
// by a permit returned; a permit is detached and resumed; a waiter by retry strategy is
// woken by a release; the free key is locked and taken with another limit;
// the Lockers are closed.
func ExercisePermits(t *testing.T, a, b *lock.Locker, waitQueued func(key string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "acl-permits-" + randHex(8)
	p1, err := a.Acquire(ctx, k, 2)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	p2, err := b.TryAcquire(ctx, k, 2)
	if err != nil {
		t.Fatalf("TryAcquire beside a permit: %v", err)
	}
	if _, err := b.TryAcquire(ctx, k, 2); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("a third permit of two: err = %v, want ErrHeld", err)
	}
	if _, err := b.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock of a key with permits held: %v", err)
	}
	if _, err := a.TryAcquire(ctx, k, 3); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("TryAcquire with another limit: %v, want ErrInvalid", err)
	}
	// A permit waiter in the queue, let in by the permit that p1 returns.
	got := make(chan error, 1)
	go func() {
		p, err := b.Acquire(ctx, k, 2)
		if err == nil {
			err = p.Unlock(ctx)
		}
		got <- err
	}()
	if waitQueued != nil {
		waitQueued(k)
	}
	time.Sleep(1500 * time.Millisecond) // p1's renewals (TTL 300ms) and the waiter's heartbeat
	if err := p1.Err(); err != nil {
		t.Fatalf("permit lost despite auto-renewal: %v", err)
	}
	if err := p2.Refresh(ctx, time.Second); err != nil {
		t.Fatalf("Refresh of a permit: %v", err)
	}
	if err := p1.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of a permit: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("permit waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("permit waiter not let in after a permit was returned")
	}
	// Resume of a detached permit.
	h, err := p2.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	p2, err = a.Resume(ctx, h)
	if err != nil {
		t.Fatalf("Resume of a permit: %v", err)
	}
	// A waiter by retry strategy, woken by a release.
	p3, err := b.TryAcquire(ctx, k, 2)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	go func() {
		p, err := a.Acquire(ctx, k, 2, lock.WithRetry(lock.LinearBackoff(time.Hour)))
		if err == nil {
			err = p.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := p3.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter by retry strategy: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter by retry strategy not woken by the release")
	}
	if err := p2.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the resumed permit: %v", err)
	}
	if l, err := b.TryLock(ctx, k); err != nil {
		t.Fatalf("TryLock after the permits: %v", err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	p4, err := a.TryAcquire(ctx, k, 3)
	if err != nil {
		t.Fatalf("TryAcquire of a free key with another limit: %v", err)
	}
	if err := p4.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for _, l := range []*lock.Locker{a, b} {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
