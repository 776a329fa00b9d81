package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit38ReaderRevokes: etcd checks a LeaseRevoke against the keys
// attached to the lease, so a user with read rights only may revoke a
// lease that has none: one granted and not yet attached, or one whose
// key was deleted. What that reader can do to dlock:
//
//   - it lists every lease (LeaseLeases checks no right);
//   - it cannot revoke a grant's lease, nor a waiter's once its entry is
//     written: the entry is attached, and the reader may not delete it;
//   - it can revoke a lease with no key, and a revoke answered with no
//     error deleted what was attached at its revision (the nemesis
//     adversary tells an empty lease's revoke apart by this);
//   - revoking every lease it can, as fast as it can, while Lockers of
//     the application's user take and hand over one key, costs them
//     tries (a grant whose lease went between its LeaseGrant and its
//     write is made again on a new lease), never a Lock, nor a holder's
//     grant, nor mutual exclusion.
func TestAudit38ReaderRevokes(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	app := userClient(t, e.Endpoints(), "app", "apppw", nil)
	reader := userClient(t, e.Endpoints(), "reader", "readerpw", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// An empty lease goes; an attached one stays, and the revoke that
	// takes a key answers at the revision of its deletion.
	empty, err := app.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Revoke(ctx, empty.ID); err != nil {
		t.Errorf("the reader's revoke of a lease with no key: %v; etcd lets it through", err)
	}
	attached, err := app.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	key := prefix + "q/revoke-probe/x"
	if _, err := app.Put(ctx, key, "v", clientv3.WithLease(attached.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Revoke(ctx, attached.ID); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the reader's revoke of a lease with %s attached: %v, want permission denied", key, err)
	}
	rr, err := app.Revoke(ctx, attached.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := app.Get(ctx, key, clientv3.WithRev(rr.Header.Revision)); err != nil || len(g.Kvs) != 0 {
		t.Errorf("a revoke's answer at revision %d, where its key is %v (%v): the adversary's check reads it as the revision after the deletion", rr.Header.Revision, g.Kvs, err)
	}

	// The storm.
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 3 * time.Second}}
	var revoked, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ls, err := reader.Leases(ctx)
			if err != nil {
				t.Errorf("the reader lists the leases: %v", err)
				return
			}
			for _, l := range ls.Leases {
				switch _, err := reader.Revoke(ctx, l.ID); {
				case err == nil:
					revoked.Add(1)
				case errors.Is(err, rpctypes.ErrPermissionDenied):
					refused.Add(1)
				}
			}
		}
	}()
	k := "revoke-storm"
	var holding atomic.Int32
	var grants atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := authLocker(t, e, "app", "apppw", opts)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := lk.Lock(lctx, k, lock.WithTTL(time.Duration(2+w)*time.Second))
				lcancel()
				if err != nil {
					select {
					case <-stop:
						return
					default:
					}
					t.Errorf("worker %d: %v", w, err)
					continue
				}
				if n := holding.Add(1); n != 1 {
					t.Errorf("%d holders of %s at once", n, k)
				}
				grants.Add(1)
				time.Sleep(50 * time.Millisecond)
				if err := l.Err(); err != nil {
					t.Errorf("worker %d lost its grant under the reader's revokes: %v", w, err)
				}
				holding.Add(-1)
				l.Unlock(ctx)
			}
		}()
	}
	time.Sleep(10 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("grants %d; the reader revoked %d leases, was refused %d", grants.Load(), revoked.Load(), refused.Load())
	if grants.Load() == 0 {
		t.Errorf("no grant in 10 s under the reader's revokes")
	}
	if refused.Load() == 0 {
		t.Errorf("the reader was never refused a revoke: it never met a grant's lease")
	}
}
