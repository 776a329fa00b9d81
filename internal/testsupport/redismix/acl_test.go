package redismix

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// minimalRules returns the ACL rules the package doc of scheme's driver
// ("Permissions") says are enough on a standalone server (commands a
// script calls are checked against them too); a Cluster client needs
// +cluster|slots on top.
func minimalRules(t *testing.T, scheme string) []string {
	return redisacl.DocRules(t, "../../../driver/"+scheme+"/doc.go")
}

// Every operation of either driver works as a user allowed only what its
// package doc lists, on one server and on a Cluster: grants, a held key,
// batched renewals, Refresh, a queued waiter handed the key, a waiter
// woken by a release, a set in one step, Unlock and Close; and no node's
// ACL LOG shows a refusal on the way.
func TestMinimalPermissions(t *testing.T) {
	for _, scheme := range []string{redisnx.Scheme, rediswatch.Scheme} {
		t.Run(scheme+"/standalone", func(t *testing.T) {
			srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-min", ACLRules: minimalRules(t, scheme)})
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer admin.Close()
			exercise(t, userURL(scheme, srv.Username, srv.Password, []string{srv.Addr()}))
			redisacl.AssertNothingRefused(t, admin, srv.Username)
		})
		t.Run(scheme+"/cluster", func(t *testing.T) {
			c := testserver.SharedRedisCluster(t)
			admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
			defer admin.Close()
			user, pass := redisacl.ClusterUser(t, admin, "dlock-acl", append(minimalRules(t, scheme), "+cluster|slots")...)
			exercise(t, userURL(scheme, user, pass, c.Addrs()))
			redisacl.AssertNothingRefused(t, admin, user)
		})
	}
}

func userURL(scheme, user, pass string, addrs []string) string {
	u := url.URL{Scheme: scheme, User: url.UserPassword(user, pass), Host: strings.Join(addrs, ",")}
	return u.String()
}

// exercise runs every driver operation through Lockers opened from u.
func exercise(t *testing.T, u string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := lock.Open(ctx, u+"?ttl=300ms")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := lock.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var leases []*lock.Lease
	for range 3 {
		lease, err := a.TryLock(ctx, "acl-"+randHex(8))
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		leases = append(leases, lease)
	}
	if _, err := b.TryLock(ctx, leases[0].Key()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock on a held key: %v", err)
	}
	time.Sleep(700 * time.Millisecond) // two TTLs: only renewals keep them
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost despite auto-renewal: %v", err)
		}
	}
	if err := leases[2].Refresh(ctx, time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	// A waiter with a retry strategy (woken through Subscribe), and one
	// in the queue (handed the key).
	for i, opts := range [][]lock.Option{{lock.WithRetry(lock.LinearBackoff(time.Hour))}, nil} {
		got := make(chan error, 1)
		go func() {
			l, err := b.Lock(ctx, leases[i].Key(), opts...)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond)
		if err := leases[i].Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d not woken by the release", i)
		}
	}
	// Shared leases: two readers (renewed), a writer queued behind them,
	// a reader's Refresh, and the releases that let the writer in.
	k := "acl-shared-" + randHex(8)
	r1, err := a.RLock(ctx, k)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	r2, err := b.TryRLock(ctx, k)
	if err != nil {
		t.Fatalf("TryRLock beside a reader: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, k)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(700 * time.Millisecond) // r1's renewals (TTL 300ms)
	if err := r1.Err(); err != nil {
		t.Fatalf("share lost despite auto-renewal: %v", err)
	}
	// Inspect reads readers and the queued writer.
	if st := mustInspect(t, ctx, a, k); len(st.Holders) != 2 || st.Holders[0].Mode != lock.Shared || len(st.Waiters) != 1 || st.Waiters[0].Mode != lock.Exclusive {
		t.Fatalf("Inspect of two readers and a queued writer: holders %+v, waiters %+v", st.Holders, st.Waiters)
	}
	if err := r2.Refresh(ctx, time.Second); err != nil {
		t.Fatalf("Refresh of a share: %v", err)
	}
	for _, r := range []*lock.Lease{r1, r2} {
		if err := r.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of a share: %v", err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("writer behind the readers: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("writer not let in after the readers left")
	}
	// A named owner: a grant, re-entries through both Lockers (renewed),
	// a hold's Refresh, and the Unlocks that count down to the release.
	k = "acl-owner-" + randHex(8)
	var holds []*lock.Lease
	for _, l := range []*lock.Locker{a, a, b} {
		h, err := l.TryLock(ctx, k, lock.WithOwner("acl-job"))
		if err != nil {
			t.Fatalf("TryLock of a named owner: %v", err)
		}
		holds = append(holds, h)
	}
	time.Sleep(700 * time.Millisecond) // renewals of a's holds (TTL 300ms)
	if err := holds[1].Refresh(ctx, time.Second); err != nil {
		t.Fatalf("Refresh of a hold: %v", err)
	}
	if st := mustInspect(t, ctx, b, k); len(st.Holders) != 1 || st.Holders[0].Holds != 3 || st.Holders[0].Owner != lock.Owner("acl-job") || st.Holders[0].Token != holds[0].Token() {
		t.Fatalf("Inspect of a named owner's grant with three holds: %+v", st.Holders)
	}
	for _, h := range holds {
		if err := h.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of a hold: %v", err)
		}
	}
	if l, err := b.TryLock(ctx, k); err != nil {
		t.Fatalf("TryLock after the last hold: %v", err)
	} else {
		l.Unlock(ctx)
	}
	// Inspect reads permits.
	k = "acl-permits-" + randHex(8)
	var permits []*lock.Lease
	for _, l := range []*lock.Locker{a, b} {
		p, err := l.TryAcquire(ctx, k, 3)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		permits = append(permits, p)
	}
	if st := mustInspect(t, ctx, a, k); len(st.Holders) != 2 || st.Holders[0].Mode != lock.Permit || st.Holders[0].Limit != 3 {
		t.Fatalf("Inspect of two permits of 3: %+v", st.Holders)
	}
	for _, p := range permits {
		p.Unlock(ctx)
	}
	// A set in one step (its lock keys in one slot): refused over a held
	// member, then taken.
	ks := sameSlot("acl-set-"+randHex(8), 3)
	held, err := a.TryLock(ctx, ks[1])
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if _, err := b.TryLockMany(ctx, ks); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany over a held key: %v, want ErrHeld", err)
	}
	held.Unlock(ctx)
	if m, err := b.TryLockMany(ctx, ks); err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany of a free set in one slot: %v, want it taken in one step", err)
	} else {
		m.Unlock(ctx)
	}
	for _, l := range []*lock.Locker{a, b} {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// mustInspect is lock.Inspect of k through l, or fails the test.
func mustInspect(t *testing.T, ctx context.Context, l *lock.Locker, k string) *lock.KeyState {
	t.Helper()
	st, err := l.Inspect(ctx, k)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return st
}

// sameSlot returns n keys, base's first, whose lock keys (default prefix)
// share a Cluster slot.
func sameSlot(base string, n int) []string {
	slot := redisx.Slot(redisx.LockKey(redisx.DefaultPrefix, base))
	ks := []string{base}
	for i := 1; len(ks) < n; i++ {
		if k := fmt.Sprintf("%s/%d", base, i); redisx.Slot(redisx.LockKey(redisx.DefaultPrefix, k)) == slot {
			ks = append(ks, k)
		}
	}
	return ks
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
