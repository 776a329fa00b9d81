package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit38CounterLeaseRevoked: the lease a Locker attaches its
// counters to is revoked behind its back (by a user with write rights
// on the counters, or as if it expired) while one of its grants holds a
// key. Every counter on it goes. The holder keeps its grant (its entry
// is on a lease of its own), nobody else is granted meanwhile, and the
// tokens that follow, the Locker's own included (its next grant finds
// its counter lease gone and makes another), keep rising.
func TestAudit38CounterLeaseRevoked(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}
	a := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	b := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, other := "audit38-counter-lease", "audit38-counter-lease-other"
	counter := prefix + "c/" + escape(k)

	o, err := a.TryLock(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	o.Unlock(ctx)
	h, err := a.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	g, err := raw.Get(ctx, counter)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) != 1 || g.Kvs[0].Lease == 0 {
		t.Fatalf("the counter %s: %v, want it on a lease", counter, g.Kvs)
	}
	if _, err := raw.Revoke(ctx, clientv3.LeaseID(g.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{counter, prefix + "c/" + escape(other)} {
		if g, err := raw.Get(ctx, c); err != nil || len(g.Kvs) != 0 {
			t.Fatalf("the counter %s after its lease's revoke: %v %v", c, g, err)
		}
	}
	if r, err := b.TryLock(ctx, k); !errors.Is(err, lock.ErrHeld) {
		if r != nil {
			r.Unlock(ctx)
		}
		t.Fatalf("another's TryLock while the key is held, its counter gone: %v", err)
	}
	last := h.Token()
	// the holder's grant lives on: renew it
	if err := h.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatalf("the holder's refresh after its counter went: %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, lk := range []*lock.Locker{a, b, a} {
		l, err := lk.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("grant %d after the counter lease's revoke: %v", i, err)
		}
		if l.Token() <= last {
			t.Errorf("grant %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g, err = raw.Get(ctx, counter)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) != 1 || g.Kvs[0].Lease == 0 {
		t.Errorf("the counter %s after new grants: %v, want it on a lease", counter, g.Kvs)
	}
}
