package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// audit39Leases lists the server's leases: those with keys attached and
// those with none.
func audit39Leases(t *testing.T, c *clientv3.Client) (attached, bare []int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ls, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls.Leases {
		r, err := c.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil || r.TTL <= 0 {
			continue // gone meanwhile
		}
		if len(r.Keys) > 0 {
			attached = append(attached, int64(l.ID))
		} else {
			bare = append(bare, int64(l.ID))
		}
	}
	return attached, bare
}

func audit39Owner(i int) string { return fmt.Sprintf("%032x", 0x39000+i) }

// TestAudit39SpareRevokedByReader: a user with read rights only revokes
// the Locker's spare (it has no key, so etcd lets it) between two
// cycles. The next grant must still be made, on a live lease of its own
// that outlasts its validity, with a higher token; and doing so round
// after round must not grow the leases on the server: the spare's loss
// is no reason to make a new 7-day counter lease, yet the fast grant
// cannot tell which of its leases etcd found gone and drops the counter
// lease too, leaving the old one (its counter moved off it) for a week.
func TestAudit39SpareRevokedByReader(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	reader := userClient(t, e.Endpoints(), "reader", "readerpw", nil)
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	d, _ := newDriver(&Options{Prefix: prefix})
	d.c = userClient(t, e.Endpoints(), "app", "apppw", nil)
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, ttl := "audit39-spare-revoked", 10*time.Second
	cycle := func(i int) *driver.Lease {
		l := &driver.Lease{Key: k, Owner: audit39Owner(i), TTL: ttl}
		start := time.Now()
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		r, err := root.TimeToLive(ctx, clientv3.LeaseID(leaseOf(l)), clientv3.WithAttachedKeys())
		if err != nil || len(r.Keys) != 1 {
			t.Fatalf("cycle %d: the grant's lease %x: %v, %v", i, leaseOf(l), r, err)
		}
		// r.TTL is the whole seconds left, rounded down: the lease lasts
		// under r.TTL+1 s more, which must cover the validity's rest
		if lasts := time.Duration(r.TTL+1)*time.Second + time.Since(start); lasts < l.Validity {
			t.Errorf("cycle %d: lease %x lasts under %v from the call's start, validity %v", i, leaseOf(l), lasts, l.Validity)
		}
		if err := d.Release(ctx, l); err != nil {
			t.Fatalf("cycle %d: release: %v", i, err)
		}
		return l
	}
	prev := cycle(0)
	cycle(1) // the counter lease and a spare are made
	_, bare0 := audit39Leases(t, root)
	all0, _ := root.Leases(ctx)
	rounds := 6
	for i := range rounds {
		spare := leaseOf(prev)
		if _, err := reader.Revoke(ctx, clientv3.LeaseID(spare)); err != nil {
			t.Fatalf("round %d: the reader revokes the spare %x: %v", i, spare, err)
		}
		l := cycle(2 + i)
		if leaseOf(l) == spare {
			t.Fatalf("round %d: granted on the revoked spare %x", i, spare)
		}
		if l.Token <= prev.Token {
			t.Fatalf("round %d: token %d after %d", i, l.Token, prev.Token)
		}
		prev = l
	}
	all1, _ := root.Leases(ctx)
	_, bare1 := audit39Leases(t, root)
	t.Logf("leases before %d (bare %d), after %d rounds %d (bare %d)", len(all0.Leases), len(bare0), rounds, len(all1.Leases), len(bare1))
	if grew := len(all1.Leases) - len(all0.Leases); grew > 1 {
		audit39Open(t)
		t.Errorf("%d revoked spares left %d more leases on the server (%d bare: %v): a new counter lease per lost spare", rounds, grew, len(bare1), bare1)
	}
}

// TestAudit39WaitLeaseSpare: a waiter granted by its fast step leaves its
// waiting lease (3 s, keyless once the entry moved) as a spare; a grant
// of a 3 s TTL then taken on it must report no more validity than the
// lease is sure to last: its entry must still be on etcd when that
// validity, counted from the call's start, is about to end, with no
// renewal meanwhile.
func TestAudit39WaitLeaseSpare(t *testing.T) {
	e := testserver.StartEtcd(t, nil)
	raw := rawClient(t, e.Endpoints())
	d, _ := testDriver(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := "audit39-wait-spare"
	holder := &driver.Lease{Key: k, Owner: audit39Owner(1), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	w := &driver.Lease{Key: k, Owner: audit39Owner(2), TTL: 10 * time.Second}
	var held *driver.HeldError
	if err := d.Join(ctx, w, wake); !errors.As(err, &held) {
		t.Fatalf("Join behind a holder: %v", err)
	}
	resp, err := raw.Get(ctx, entryKey(d, w))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the waiter's entry: %v %v", resp, err)
	}
	waitLease := resp.Kvs[0].Lease
	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		err := d.Check(ctx, w)
		if err == nil {
			break
		}
		if !errors.As(err, &held) || try > 50 {
			t.Fatalf("Check: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if leaseOf(w) == waitLease {
		t.Fatalf("the waiter was granted on its waiting lease %x (TTL 10 s asked)", waitLease)
	}
	time.Sleep(700 * time.Millisecond) // the spare ages
	l := &driver.Lease{Key: k + "-2", Owner: audit39Owner(3), TTL: 3 * time.Second}
	start := time.Now()
	if err := d.Acquire(ctx, l); err != nil {
		t.Fatal(err)
	}
	if leaseOf(l) != waitLease {
		t.Logf("the 3 s grant is on lease %x, not the waiting lease %x: no reuse seen", leaseOf(l), waitLease)
	}
	t.Logf("validity %v on lease %x (the waiting lease %x)", l.Validity, leaseOf(l), waitLease)
	if l.Validity > 3*time.Second {
		t.Fatalf("validity %v over the TTL", l.Validity)
	}
	time.Sleep(time.Until(start.Add(l.Validity - 150*time.Millisecond)))
	resp, err = raw.Get(ctx, entryKey(d, l))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("the grant's entry is gone %v after its call began, within its validity %v", time.Since(start), l.Validity)
	}
	d.Release(ctx, l)
	d.Release(ctx, w)
}

// TestAudit39NoBareLeaseAfterClose: after cycles and a queued wait, a
// Locker's Close leaves no lease with nothing attached on the server
// (its spares are revoked); only the counter lease, which holds the
// counters, stays.
func TestAudit39NoBareLeaseAfterClose(t *testing.T) {
	e := testserver.StartEtcd(t, nil)
	raw := rawClient(t, e.Endpoints())
	d, _ := testDriver(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, before := audit39Leases(t, raw)
	for i := range 4 {
		for _, ttl := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second} {
			l := &driver.Lease{Key: fmt.Sprintf("audit39-close-%d", i), Owner: audit39Owner(i*10 + int(ttl/time.Second)), TTL: ttl}
			if err := d.Acquire(ctx, l); err != nil {
				t.Fatal(err)
			}
			if err := d.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	holder := &driver.Lease{Key: "audit39-close-w", Owner: audit39Owner(100), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	w := &driver.Lease{Key: "audit39-close-w", Owner: audit39Owner(101), TTL: 10 * time.Second}
	var held *driver.HeldError
	if err := d.Join(ctx, w, make(chan struct{}, 1)); !errors.As(err, &held) {
		t.Fatal(err)
	}
	d.Release(ctx, holder)
	for try := 0; ; try++ {
		err := d.Check(ctx, w)
		if err == nil {
			break
		}
		if !errors.As(err, &held) || try > 50 {
			t.Fatalf("Check: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Release(ctx, w)
	_, open := audit39Leases(t, raw)
	d.Close()
	attached, after := audit39Leases(t, raw)
	t.Logf("bare leases: before %d, open %d, after Close %d; attached after Close %d", len(before), len(open), len(after), len(attached))
	if len(after) > len(before) {
		t.Errorf("Close left %d bare leases (%v), %d before the Locker", len(after), after, len(before))
	}
}
