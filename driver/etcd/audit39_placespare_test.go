package etcd

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit39PlaceOnSpareValidity: a Join finds the key held, and places
// its entry on a lease of max(TTL, 3 s) taken by takeLease: a spare of
// 3 s when one is kept (a released 3 s grant's lease, or a waiting
// lease a fast step left). The holder leaves between the attempt's read
// and the place, so the place's step grants at once, on the waiting
// lease itself (the grant's TTL is the waiting lease's, 3 s): the step
// counts that lease as renewed by this call ("place's grant"), and
// reports the whole TTL as validity, though the spare was made before
// the call and has less left. lock's deadline then falls after etcd
// expires the entry: with renewal off, or a holder paused, another
// client is granted before Done closes.
//
// Fixed in step: a grant on the waiting lease reports what is left of
// it (ws.leaseExp). The holder leaves at the place's first clock reading (d.wall, which
// place reads before its write): the only hook the test needs.
func TestAudit39PlaceOnSpareValidity(t *testing.T) {
	e := testserver.SharedEtcd(t)
	raw := rawClient(t, e.Endpoints())
	d, _ := testDriver(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := 3 * time.Second
	k := "audit39-place-spare"
	// a spare of 3 s, aged
	warm := &driver.Lease{Key: k + "-warm", Owner: audit39Owner(1), TTL: ttl}
	if err := d.Acquire(ctx, warm); err != nil {
		t.Fatal(err)
	}
	made := time.Now()
	if err := d.Release(ctx, warm); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	// a holder (a foreign entry, as another client's) that leaves when
	// the place reads the clock
	q := d.names(k).queue
	g, err := raw.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, q+"holder", "", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	d.wall = func() time.Time {
		if calls.Add(1) == 2 { // the fast grant's, then the place's
			raw.Revoke(context.Background(), g.ID)
		}
		return time.Now()
	}
	l := &driver.Lease{Key: k, Owner: audit39Owner(2), TTL: ttl}
	start := time.Now()
	if err := d.Join(ctx, l, make(chan struct{}, 1)); err != nil {
		t.Fatalf("Join: %v (clock read %d times)", err, calls.Load())
	}
	d.wall = time.Now
	t.Logf("granted on lease %x (the spare %x, made %v before the call), validity %v", leaseOf(l), leaseOf(warm), start.Sub(made), l.Validity)
	if leaseOf(l) != leaseOf(warm) {
		t.Skipf("not granted on the spare: the sequence did not happen")
	}
	if bound := made.Add(ttl).Sub(start); l.Validity > bound {
		t.Errorf("validity %v on a lease made %v before the call: it is sure to last %v from the call's start", l.Validity, start.Sub(made), bound)
	}
	time.Sleep(time.Until(start.Add(l.Validity - l.Validity/100 - 100*time.Millisecond)))
	r, err := raw.Get(ctx, entryKey(d, l))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		t.Errorf("the entry is gone %v after the call's start, before lock's deadline (validity %v less the drift margin): another client can be granted while Done is open", time.Since(start), l.Validity)
	}
	d.Release(ctx, l)
}
