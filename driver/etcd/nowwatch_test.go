package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestWatchFromNowCoversTheGap: a waiter watches the entry ahead of it
// from etcd's revision when the watch is made (watcher.addNow), which
// on a busy key is past the waiter's read. An entry deleted between the
// read and the watch must still wake the waiter at once (stillThere
// reads it again), and one still there must not, until it goes.
func TestWatchFromNowCoversTheGap(t *testing.T) {
	e := testserver.SharedEtcd(t)
	raw := rawClient(t, e.Endpoints())
	d, _ := newDriver(&Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())})
	d.c = raw
	if _, err := d.client(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := d.names("gap")
	l := &driver.Lease{Key: "gap", Owner: fmt.Sprintf("%032x", 7), TTL: 30 * time.Second, Mode: driver.Exclusive}

	// wait makes the waiter's watches as its step does, on the entry
	// ahead named ahead as read at revision read, and reports whether
	// it is woken within d.
	wait := func(ahead string, read int64) func(d time.Duration) bool {
		r, err := raw.Get(ctx, n.queue+ahead, clientv3.WithRev(read))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("the entry ahead at revision %d: %v, %d keys", read, err, len(r.Kvs))
		}
		wake := make(chan struct{}, 1)
		ws := &waitState{name: "waiter", wake: wake}
		d.rewatch(n, ws, []entry{parseEntry(n, r.Kvs[0])}, l, read+1)
		t.Cleanup(func() { d.unwatch(ws) })
		return func(d time.Duration) bool {
			select {
			case <-wake:
				return true
			case <-time.After(d):
				return false
			}
		}
	}

	// deleted after the read, before the watch: woken at once
	put, err := raw.Put(ctx, n.queue+"a", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, n.queue+"a"); err != nil {
		t.Fatal(err)
	}
	if !wait("a", put.Header.Revision)(2 * time.Second) {
		t.Error("the entry ahead was deleted between the read and the watch: the waiter was not woken")
	}

	// put again under the same name after the read: a new generation,
	// so the one read is gone: woken
	put, err = raw.Put(ctx, n.queue+"b", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, n.queue+"b"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, n.queue+"b", "x"); err != nil {
		t.Fatal(err)
	}
	if !wait("b", put.Header.Revision)(2 * time.Second) {
		t.Error("the entry ahead was deleted and put again between the read and the watch: the waiter was not woken")
	}

	// still there, with a write after the read: not woken until it goes
	put, err = raw.Put(ctx, n.queue+"c", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, n.queue+"other", "x"); err != nil {
		t.Fatal(err)
	}
	woken := wait("c", put.Header.Revision)
	if woken(500 * time.Millisecond) {
		t.Error("woken while the entry ahead is still there")
	}
	if _, err := raw.Delete(ctx, n.queue+"c"); err != nil {
		t.Fatal(err)
	}
	if !woken(2 * time.Second) {
		t.Error("the entry ahead was deleted after the watch: the waiter was not woken")
	}
}
