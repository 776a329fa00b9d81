package etcd

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit38RevokeInWindow: a user with read rights only may revoke a
// lease with no key attached (TestAudit38ReaderRevokes). Here such a
// revoke lands in the narrowest window there is: between a request
// that made a lease and the write that attaches it, as the write is on
// its way. Revoked are a TryLock's grant lease and, while it has no key,
// the Locker's counter lease; a waiter's lease before its place's write;
// a queued grant's new lease before the grant's write. Each attempt
// must take new leases and be granted, with tokens that rise, and
// nothing may be left after the Unlocks. (The revokes here are made by
// a client with every right, on leases with no key, which is what a
// reader may do.)
func TestAudit38RevokeInWindow(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	p := newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}
	l := newTestLocker(t, []string{p.addr()}, opts, &netCut{})
	other := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	k := "audit38-revoke-window"
	queue := prefix + "q/" + escape(k) + "/"

	var armPlace, armGrant atomic.Bool
	var revoked atomic.Int64
	// revokeEmpty revokes lease id if no key is attached to it.
	revokeEmpty := func(id int64) {
		ttl, err := raw.TimeToLive(ctx, clientv3.LeaseID(id), clientv3.WithAttachedKeys())
		if err != nil || ttl.TTL <= 0 || len(ttl.Keys) > 0 {
			return
		}
		if _, err := raw.Revoke(ctx, clientv3.LeaseID(id)); err == nil {
			revoked.Add(1)
		}
	}
	place, grant := placeTxn(prefix), grantTxn(prefix)
	before := func(r *pb.TxnRequest) bool {
		switch {
		case place(r) && armPlace.CompareAndSwap(true, false):
			revokeEmpty(r.Success[0].GetRequestPut().Lease)
		case grant(r) && armGrant.CompareAndSwap(true, false):
			revokeEmpty(r.Success[0].GetRequestPut().Lease)
			revokeEmpty(r.Success[1].GetRequestPut().Lease)
		}
		return false
	}
	p.before.Store(&before)

	// a TryLock: its lease and the new Locker's counter lease
	armGrant.Store(true)
	a, err := l.TryLock(ctx, k)
	if err != nil {
		t.Fatalf("a TryLock whose leases were revoked before its write (%d revoked): %v", revoked.Load(), err)
	}
	if n := revoked.Load(); n != 2 {
		t.Fatalf("%d leases revoked before the TryLock's write, want its own and the counter's", n)
	}
	last := a.Token()
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// a queued Lock: its waiting lease before its place, its grant's
	// lease before its grant
	for i := range 3 {
		h, err := other.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if h.Token() <= last {
			t.Fatalf("round %d: the holder's token %d after %d", i, h.Token(), last)
		}
		n := revoked.Load()
		armPlace.Store(true)
		got := make(chan error, 1)
		var w *lock.Lease
		go func() {
			var err error
			w, err = l.Lock(ctx, k)
			got <- err
		}()
		waitEntries(t, raw, queue, 2)
		armGrant.Store(true)
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: a queued Lock whose leases were revoked before its writes (%d revoked): %v", i, revoked.Load()-n, err)
		}
		if m := revoked.Load() - n; m < 2 {
			t.Fatalf("round %d: %d leases revoked before the waiter's writes, want its waiting lease and its grant's", i, m)
		}
		if w.Token() <= h.Token() {
			t.Errorf("round %d: the waiter's token %d after the holder's %d", i, w.Token(), h.Token())
		}
		last = w.Token()
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r, err := raw.Get(ctx, queue, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Errorf("after the Unlocks, %s is left", r.Kvs[0].Key)
	}
}

// TestAudit38LatePlace: a waiter's place is held on its way to etcd
// until after the waiter gave up (its Lock's context ended, lock made
// its Leave), then applied. The write must fail for want of its lease
// (Leave revoked the leases the attempt made): no entry appears, and
// once the holder releases, the key is free at once.
func TestAudit38LatePlace(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	p := newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}
	l := newTestLocker(t, []string{p.addr()}, opts, &netCut{})
	other := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := "audit38-late-place"
	queue := prefix + "q/" + escape(k) + "/"

	h, err := other.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	held, late := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	var lease atomic.Int64
	armed.Store(true)
	place := placeTxn(prefix)
	before := func(r *pb.TxnRequest) bool {
		if !place(r) || !armed.CompareAndSwap(true, false) {
			return false
		}
		lease.Store(r.Success[0].GetRequestPut().Lease)
		close(held)
		<-late
		return true
	}
	p.before.Store(&before)
	wctx, wcancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := l.Lock(wctx, k)
		gave <- err
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the waiter's place never came")
	}
	wcancel()
	if err := <-gave; err == nil {
		t.Fatal("a Lock whose context ended was granted")
	}
	// lock's Leave of the attempt, in the background, revokes the
	// place's lease (3 s: the late place must land before it expires)
	for left := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		ttl, err := raw.TimeToLive(ctx, clientv3.LeaseID(lease.Load()))
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL < 0 { // -1: not found (0 is its last second)
			break
		}
		if time.Since(left) > 2*time.Second {
			close(late)
			t.Fatalf("the waiter's lease %x, made for a place still on its way, is not revoked %v after its Lock ended", lease.Load(), time.Since(left).Round(time.Millisecond))
		}
	}
	close(late)
	for p.late.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the late place was never sent on")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := raw.Get(ctx, queue, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 {
		t.Errorf("after the waiter left and its place landed late, %d entries (want the holder's)", len(r.Kvs))
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := other.TryLock(ctx, k)
	if err != nil {
		t.Fatalf("a TryLock after the release, the late place applied: %v", err)
	}
	n.Unlock(ctx)
}
