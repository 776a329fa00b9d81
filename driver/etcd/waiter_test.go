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

// TestWaiterLeaseExpired is etcd-io/etcd#11456 (Jepsen: concurrency.Mutex
// returned after blocking without checking that its session's lease was
// alive): a waiter whose lease expires while it is blocked (here a proxy
// holds every byte of its connection, as a paused process's connection
// is held: open and silent) loses its place, and when it is back it must
// not be granted the key that the waiter behind it got meanwhile: it
// queues again at the end.
func TestWaiterLeaseExpired(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 2 * time.Second}}
	holder := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	p := newDelayProxy(t, e.Addr())
	paused := newTestLocker(t, []string{"http://" + p.addr()}, opts, &netCut{})
	next := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	raw := rawClient(t, e.Endpoints())
	k := "jepsen-11456"
	queue := MutexPrefix(prefix, k) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	h, err := holder.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lock.Lease
		err error
	}
	pausedGot := make(chan result, 1)
	go func() {
		l, err := paused.Lock(ctx, k)
		pausedGot <- result{l, err}
	}()
	waitEntries(t, raw, queue, 2)
	p.hold() // its keep-alives stop: its lease (3 s) expires
	waitEntries(t, raw, queue, 1)

	nextGot := make(chan result, 1)
	go func() {
		l, err := next.Lock(ctx, k)
		nextGot <- result{l, err}
	}()
	waitEntries(t, raw, queue, 2)
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var n result
	select {
	case n = <-nextGot:
		if n.err != nil {
			t.Fatalf("the next waiter: %v", n.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next waiter was not granted the released key")
	}
	p.release() // the paused waiter is back
	select {
	case pg := <-pausedGot:
		if pg.err != nil {
			t.Fatalf("the waiter whose lease expired while it was blocked failed: %v; want it queued again", pg.err)
		}
		t.Fatalf("the waiter whose lease expired while it was blocked was granted the key (token %d) while the next waiter holds it (token %d)", pg.l.Token(), n.l.Token())
	case <-time.After(3 * time.Second):
	}
	if err := n.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case pg := <-pausedGot:
		if pg.err != nil {
			t.Fatalf("the waiter, queued again: %v", pg.err)
		}
		if pg.l.Token() <= n.l.Token() {
			t.Errorf("token %d after %d", pg.l.Token(), n.l.Token())
		}
		pg.l.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter, queued again, was not granted the key after its release")
	}
}

// waitEntries waits until queue has n keys.
func waitEntries(t *testing.T, raw *clientv3.Client, queue string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := raw.Get(context.Background(), queue, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if err == nil && resp.Count == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue %s does not have %d entries", queue, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
