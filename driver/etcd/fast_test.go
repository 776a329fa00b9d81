package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// testDriver is a driver on a client of its own, with request counts.
func testDriver(t *testing.T, e *testserver.Etcd) (*etcdDriver, *rpcCount) {
	t.Helper()
	r := &rpcCount{n: map[string]int{}}
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: r.options()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d, _ := newDriver(&Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())})
	d.c = c
	t.Cleanup(func() { d.Close() })
	return d, r
}

// TestUncontendedCycleRequests: once a Locker has a spare lease, an
// uncontended Acquire and Release are one KV/Txn each: no read before
// the grant, no LeaseGrant, no LeaseRevoke.
func TestUncontendedCycleRequests(t *testing.T) {
	d, r := testDriver(t, testserver.SharedEtcd(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 4 {
		l := &driver.Lease{Key: "cycle", Owner: fmt.Sprintf("%032x", i+1), TTL: 10 * time.Second}
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		got := r.reset()
		if i == 0 {
			continue // the first makes the lease and the counter lease
		}
		if got["/etcdserverpb.KV/Txn"] != 2 || got["/etcdserverpb.Lease/LeaseGrant"] != 0 || got["/etcdserverpb.Lease/LeaseRevoke"] != 0 {
			t.Fatalf("cycle %d: %v; want 2 KV/Txn and no lease request", i, got)
		}
		if got["/etcdserverpb.Watch/Watch send"] != 0 {
			t.Fatalf("cycle %d: %v; a grant released within %v needs no watch", i, got, holderWatchDelay)
		}
	}
}

// TestSpareValidity: a grant on a spare reports as validity what is left
// of the spare, not the whole TTL: its lease was made before the call.
func TestSpareValidity(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, _ := testDriver(t, e)
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ttl := 8 * time.Second
	first := &driver.Lease{Key: "spare-validity", Owner: fmt.Sprintf("%032x", 1), TTL: ttl}
	if err := d.Acquire(ctx, first); err != nil {
		t.Fatal(err)
	}
	made := time.Now() // after its LeaseGrant was sent
	if err := d.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	l := &driver.Lease{Key: "spare-validity", Owner: fmt.Sprintf("%032x", 2), TTL: ttl}
	if err := d.Acquire(ctx, l); err != nil {
		t.Fatal(err)
	}
	defer d.Release(ctx, l)
	if leaseOf(l) != leaseOf(first) {
		t.Fatalf("the second grant is on lease %v, not the spare %v", leaseOf(l), leaseOf(first))
	}
	if bound := ttl - time.Since(made); l.Validity > bound {
		t.Fatalf("validity %v on a spare made %v ago with TTL %v: more than the %v it is sure to last", l.Validity, time.Since(made), ttl, bound)
	}
	ttlResp, err := raw.TimeToLive(ctx, clientv3.LeaseID(leaseOf(l)))
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Duration(ttlResp.TTL+1) * time.Second; left < l.Validity {
		t.Fatalf("the lease has %v left on etcd, less than the validity %v", left, l.Validity)
	}
}

// TestFastGrantCounterAhead: the fast grant compares the counter's value
// with the clock; a counter ahead of the clock (written in the padded
// form) makes it fail, and the grant then takes counter + 1.
func TestFastGrantCounterAhead(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, _ := testDriver(t, e)
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := "fast-counter-ahead"
	warm := &driver.Lease{Key: k, Owner: fmt.Sprintf("%032x", 1), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, warm); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, warm); err != nil {
		t.Fatal(err)
	}
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	if _, err := raw.Put(ctx, d.names(k).counter, counterValue(ahead)); err != nil {
		t.Fatal(err)
	}
	l := &driver.Lease{Key: k, Owner: fmt.Sprintf("%032x", 2), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, l); err != nil {
		t.Fatal(err)
	}
	defer d.Release(ctx, l)
	if l.Token <= ahead {
		t.Fatalf("token %d, not above the counter %d a day ahead of the clock", l.Token, ahead)
	}
}

// TestFastStepKeepsOrder: a waiter's fast step grants only when no entry
// is ahead of it: the second of two waiters, stepping every heartbeat,
// is not granted while the first waits behind a holder.
func TestFastStepKeepsOrder(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 10 * time.Second}}
	ls := []*lock.Locker{
		newTestLocker(t, e.Endpoints(), opts, &netCut{}),
		newTestLocker(t, e.Endpoints(), opts, &netCut{}),
		newTestLocker(t, e.Endpoints(), opts, &netCut{}),
	}
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "fast-step-order"
	// warm each Locker's spares, so that the waiters' steps are fast
	for _, l := range ls {
		h, err := l.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		h.Unlock(ctx)
	}
	h, err := ls[0].Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan *lock.Lease, 1)
	go func() {
		w, err := ls[1].Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		first <- w
	}()
	waitEntries(t, raw, prefix+"q/"+escape(k)+"/", 2)
	second := make(chan *lock.Lease, 1)
	go func() {
		w, err := ls[2].Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		second <- w
	}()
	waitEntries(t, raw, prefix+"q/"+escape(k)+"/", 3)
	select {
	case w := <-second:
		t.Fatalf("the second waiter was granted (token %d) while the holder held and the first waited", w.Token())
	case w := <-first:
		t.Fatalf("the first waiter was granted (token %d) while the holder held", w.Token())
	case <-time.After(2500 * time.Millisecond): // two heartbeat steps or more
	}
	h.Unlock(ctx)
	w := <-first
	select {
	case w2 := <-second:
		t.Fatalf("the second waiter was granted (token %d) while the first held", w2.Token())
	case <-time.After(1500 * time.Millisecond):
	}
	w.Unlock(ctx)
	(<-second).Unlock(ctx)
}

// TestFastGrantLostReply: the reply of a fast grant's write is lost (the
// write landed); the try sent again finds the queue holding the entry,
// which it must recognise as its own (its lease and value): every
// TryLock of a free key is granted, tokens rise, nothing is left.
func TestFastGrantLostReply(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	p := newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	l := newTestLocker(t, []string{p.addr()}, &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}, &netCut{})
	raw := rawClient(t, e.Endpoints())
	fast := func(r *pb.TxnRequest) bool { // the fast grant: it compares the counter's value
		return grantTxn(prefix)(r) && len(r.Compare) == 2 && r.Compare[1].Target == pb.Compare_VALUE
	}
	var carried atomic.Int64
	p.losing(func(r *pb.TxnRequest) bool { return fast(r) && carried.Add(1)%2 == 0 })
	k := "fast-lost-grant"
	var last uint64
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ls, err := l.TryLock(ctx, k)
		if err != nil {
			cancel()
			t.Fatalf("TryLock %d of a free key (%d fast grant replies lost): %v", i, p.lost.Load(), err)
		}
		if ls.Token() <= last {
			t.Fatalf("token %d after %d", ls.Token(), last)
		}
		last = ls.Token()
		if err := ls.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	if p.lost.Load() == 0 {
		t.Fatal("no fast grant reply was lost: the attack did not happen")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := raw.Get(ctx, prefix+"q/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Errorf("after every Unlock, %d entries are left: %s", len(r.Kvs), r.Kvs[0].Key)
	}
	t.Logf("%d fast grant replies lost", p.lost.Load())
}

// TestDeletedBeforeItsWatch: a grant's entry deleted before its watch is
// created (holderWatchDelay) ends the lease when the watch is made (it
// starts at the grant's next revision), not at the next renewal.
func TestDeletedBeforeItsWatch(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	l := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix, Options: lock.Options{TTL: 30 * time.Second}}, &netCut{})
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := l.Lock(ctx, "deleted-early")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, prefix+"q/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(holderWatchDelay + 2*time.Second): // renewal comes at ~10s
		t.Fatalf("Done still open %v after the entry was deleted, %v after the grant", holderWatchDelay+2*time.Second, holderWatchDelay)
	}
}

// TestQueuedKeySkipsFastGrant: for busyFor after one of its waiters found
// a key queued, a Locker's Join of the key places its entry at once (a
// fast grant there would fail and read): a free key is then granted in
// two KV/Txn (the place, the grant); after busyFor, in one again.
func TestQueuedKeySkipsFastGrant(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, r := testDriver(t, e)
	other, _ := testDriver(t, e)
	other.prefix = d.prefix
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner := 0
	lease := func() *driver.Lease {
		owner++
		return &driver.Lease{Key: "busy", Owner: fmt.Sprintf("%032x", owner), TTL: 10 * time.Second}
	}
	h := lease()
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	w, wake := lease(), make(chan struct{}, 1)
	if err := d.Join(ctx, w, wake); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Join behind a holder: %v, want held", err)
	}
	if err := other.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	for err := d.Check(ctx, w); err != nil; err = d.Check(ctx, w) {
		if !errors.Is(err, driver.ErrHeld) {
			t.Fatal(err)
		}
		select {
		case <-wake:
		case <-time.After(time.Second):
		}
	}
	if err := d.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	cycle := func() int {
		r.reset()
		l := lease()
		if err := d.Join(ctx, l, make(chan struct{}, 1)); err != nil {
			t.Fatalf("Join of a free key: %v", err)
		}
		got := r.reset()["/etcdserverpb.KV/Txn"]
		if err := d.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := cycle(); got != 2 {
		t.Errorf("Join of a free key a waiter found queued just now: %d KV/Txn, want 2 (the place, the grant)", got)
	}
	d.mu.Lock()
	d.busy["busy"] = time.Now().Add(-busyFor - time.Millisecond)
	d.mu.Unlock()
	if got := cycle(); got != 1 {
		t.Errorf("Join of a free key %v after a waiter found it queued: %d KV/Txn, want 1 (the fast grant)", busyFor, got)
	}
}
