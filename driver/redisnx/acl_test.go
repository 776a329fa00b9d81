package redisnx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// docRules returns the ACL rules of the package doc's "Permissions"
// section, as written there, with resetkeys and resetchannels before the
// key and channel patterns (ACL SETUSER adds patterns to those a user
// has).
func docRules(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "// # Permissions\n")
	if !ok {
		t.Fatalf("doc.go has no Permissions section")
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
		t.Fatalf("rules %q read from doc.go's Permissions section", rules)
	}
	return rules
}

// The permits of a semaphore work as a user allowed only the rules of the
// package doc, on one server and on a Cluster (plus +cluster|slots): a
// permit taken and renewed, a permit waiter queued and handed the permit
// returned, a waiter by retry strategy woken by a release, a limit
// refused, Refresh, Resume and Unlock of a permit; and no node's ACL LOG
// shows a refusal on the way. (internal/redismix's TestMinimalPermissions
// checks the other operations with the same rules.)
func TestMinimalPermissionsPermits(t *testing.T) {
	rules := docRules(t)
	t.Run("standalone", func(t *testing.T) {
		srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-min", ACLRules: rules})
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer admin.Close()
		exercisePermits(t, userURL(srv.Username, srv.Password, []string{srv.Addr()}))
		assertNothingRefused(t, admin, srv.Username)
	})
	t.Run("cluster", func(t *testing.T) {
		admin := sharedCluster(t)
		user, pass := aclUser(t, admin, append(append([]string{}, rules...), "+cluster|slots"))
		exercisePermits(t, userURL(user, pass, admin.Options().Addrs))
		assertNothingRefused(t, admin, user)
	})
}

func userURL(user, pass string, addrs []string) string {
	u := url.URL{Scheme: Scheme, User: url.UserPassword(user, pass), Host: strings.Join(addrs, ",")}
	return u.String()
}

func exercisePermits(t *testing.T, u string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(u string) lock.SemLocker {
		l, err := lock.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return sem(t, l)
	}
	a, b := open(u+"?ttl=300ms"), open(u)
	k := "acl-permits-" + randHex(8)
	p1, err := a.Acquire(ctx, k, 2)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	p2, err := b.TryAcquire(ctx, k, 2)
	if err != nil {
		t.Fatalf("TryAcquire beside a permit: %v", err)
	}
	if _, err := b.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock of a key with permits held: %v", err)
	}
	if _, err := a.TryAcquire(ctx, k, 3); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("TryAcquire with another limit: %v, want ErrInvalid", err)
	}
	// A permit waiter in the queue, handed the permit that p1 returns.
	got := make(chan error, 1)
	go func() {
		p, err := b.Acquire(ctx, k, 2)
		if err == nil {
			err = p.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(700 * time.Millisecond) // p1's renewals (TTL 300ms)
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
		t.Fatalf("permit waiter not handed the returned permit")
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
	} else {
		l.Unlock(ctx)
	}
	for _, l := range []lock.Locker{a, b} {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// aclUser makes an ACL user with rules on every master of the Cluster
// behind admin, deleted at cleanup, and returns its name and password.
func aclUser(t *testing.T, admin *redis.ClusterClient, rules []string) (user, pass string) {
	t.Helper()
	user, pass = "dlock-acl-"+randHex(4), randHex(12)
	ctx := tctx(t, 10*time.Second)
	args := append([]string{"reset", "on", ">" + pass, "~*", "&*", "+@all"}, rules...)
	if err := admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.ACLSetUser(ctx, user, args...).Err()
	}); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.ACLDelUser(ctx, user).Err()
		})
	})
	return user, pass
}

// assertNothingRefused fails if any node's ACL LOG lists a refusal for
// user: a command, key or channel it was not allowed.
func assertNothingRefused(t *testing.T, admin redis.UniversalClient, user string) {
	t.Helper()
	ctx := tctx(t, 10*time.Second)
	check := func(ctx context.Context, node *redis.Client) error {
		entries, err := node.ACLLog(ctx, 1000).Result()
		if err != nil {
			t.Errorf("%s: ACL LOG: %v", node.Options().Addr, err)
		}
		for _, e := range entries {
			if e.Username == user {
				t.Errorf("%s: %s refused %q to the driver's user (%s) %d time(s)", node.Options().Addr, e.Reason, e.Object, e.Context, e.Count)
			}
		}
		return nil
	}
	switch c := admin.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, check); err != nil {
			t.Errorf("ForEachMaster: %v", err)
		}
	case *redis.Client:
		_ = check(ctx, c)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
