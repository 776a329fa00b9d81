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

// TestAudit44HeldWatchCreation attacks the watch from etcd's current
// revision (d114ae6): the reply that creates a waiter's watch on the
// entry ahead is held on its way (a proxy) while that entry is deleted
// and put again under the same name (entry names are reused per Locker).
// The watch then starts after both, so its events say nothing; the
// creation reply's revision is past the read, and the gap's read finds
// the entry with another create revision: the waiter must be woken when
// the reply comes (before the watcher's silence check would restart the
// stream). An entry still there after a held creation must not wake it.
func TestAudit44HeldWatchCreation(t *testing.T) {
	e := testserver.SharedEtcd(t)
	raw := rawClient(t, e.Endpoints())
	p := newGRPCProxy(t, e.Addr())
	d, _ := newDriver(&Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())})
	d.c = rawClient(t, []string{p.addr()})
	if _, err := d.client(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := d.names("held")
	l := &driver.Lease{Key: "held", Owner: fmt.Sprintf("%032x", 9), TTL: 30 * time.Second, Mode: driver.Exclusive}

	watchHeld := func(name string, between func()) (woken func(time.Duration) bool) {
		t.Helper()
		put, err := raw.Put(ctx, n.queue+name, "x")
		if err != nil {
			t.Fatal(err)
		}
		r, err := raw.Get(ctx, n.queue+name, clientv3.WithRev(put.Header.Revision))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("read: %v", err)
		}
		wake := make(chan struct{}, 1)
		ws := &waitState{name: "waiter", wake: wake}
		p.holdWatch()
		d.rewatch(n, ws, []entry{parseEntry(n, r.Kvs[0])}, l, put.Header.Revision+1)
		t.Cleanup(func() { d.unwatch(ws) })
		between()
		time.Sleep(300 * time.Millisecond) // the create request reaches etcd
		select {
		case <-wake:
			t.Fatal("woken while the watch's replies were held")
		default:
		}
		p.releaseWatch()
		return func(dur time.Duration) bool {
			select {
			case <-wake:
				return true
			case <-time.After(dur):
				return false
			}
		}
	}

	// Deleted and put again while the creation reply is held: woken.
	woken := watchHeld("a", func() {
		if _, err := raw.Delete(ctx, n.queue+"a"); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Put(ctx, n.queue+"a", "x"); err != nil {
			t.Fatal(err)
		}
	})
	if !woken(1500 * time.Millisecond) {
		t.Error("the entry ahead was deleted and put again while the watch's creation was held: the waiter was not woken")
	}

	// Still there, another write meanwhile: not woken until it goes.
	woken = watchHeld("b", func() {
		if _, err := raw.Put(ctx, n.queue+"other", "x"); err != nil {
			t.Fatal(err)
		}
	})
	if woken(700 * time.Millisecond) {
		t.Error("woken while the entry ahead is still there")
	}
	if _, err := raw.Delete(ctx, n.queue+"b"); err != nil {
		t.Fatal(err)
	}
	if !woken(2 * time.Second) {
		t.Error("the entry ahead was deleted after the watch: the waiter was not woken")
	}
}
