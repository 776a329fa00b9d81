package etcd

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TestAudit47RetriedDeleteLandsLate: clientv3's retry interceptor sends
// a request again, mutating or not, when a try fails with gRPC's
// Canceled or DeadlineExceeded status while the caller's context is
// still live (an HTTP/2 proxy or load balancer resetting the stream
// with CANCEL on a per-try timeout does this). The first try may still
// land. A release's delete then has a definite reply (the second try's)
// though its first copy is in flight; if it were a plain KV/DeleteRange,
// the copy landing after the Locker's next grant took the name would
// delete that grant (two holders: the finding, when the release was one
// for a while). The release compares the entry's create revision, so the
// late copy deletes nothing. Here the first try of the release's request
// (KV/Txn or KV/DeleteRange) fails with Canceled at once and reaches etcd
// after the next grant under the name was made.
func TestAudit47RetriedDeleteLandsLate(t *testing.T) {
	e := testserver.SharedEtcd(t)
	var armed atomic.Bool
	late := make(chan func(), 1)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			var resp any
			switch method {
			case "/etcdserverpb.KV/DeleteRange":
				resp = new(pb.DeleteRangeResponse)
			case "/etcdserverpb.KV/Txn":
				resp = new(pb.TxnResponse)
			}
			if resp == nil || !armed.CompareAndSwap(true, false) {
				return inv(ctx, method, req, reply, cc, opts...)
			}
			// the try's request is held in the network and lands later;
			// its stream is reset now
			late <- func() { inv(context.Background(), method, req, resp, cc) }
			dead, kill := context.WithCancel(ctx)
			kill()
			return inv(dead, method, req, reply, cc, opts...)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, _ := newDriver(&Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())})
	d.c = c
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	k := "audit47-late"
	a := &driver.Lease{Key: k, Owner: slotOwner(1), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err = d.Release(ctx, a)
	if armed.Load() {
		t.Fatal("the release sent no write")
	}
	t.Logf("release: %v", err)
	var land func()
	select {
	case land = <-late:
	default:
		t.Fatal("no held try")
	}
	b := &driver.Lease{Key: k, Owner: slotOwner(2), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, b); err != nil {
		t.Fatal(err)
	}
	land() // the first try of a's delete lands
	_, errs := d.RefreshBatch(ctx, []*driver.Lease{b}, 10*time.Second)
	if errs[0] != nil {
		t.Fatalf("b (name %s, a's %s) lost its grant to a's delete landing late: %v", b.Data.(grantRef).name, a.Data.(grantRef).name, errs[0])
	}
	o := &driver.Lease{Key: k, Owner: slotOwner(3), TTL: 10 * time.Second}
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
	defer tcancel()
	if err := d.Acquire(tctx, o); err == nil {
		t.Fatal("two holders: o granted while b holds")
	}
	if err := d.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// TestAudit47RetriedGrantLandsLate: the same retry of clientv3 on a
// grant's write (KV/Txn, put if the name is empty). The first try lands
// after the grant, made by the second try, was released: it writes an
// entry with a token, on the grant's lease, which the release kept as a
// spare; the Locker's later grants renew that spare, so the entry no
// one holds keeps the key from every other client.
func TestAudit47RetriedGrantLandsLate(t *testing.T) {
	e := testserver.SharedEtcd(t)
	var armed atomic.Bool
	late := make(chan func(), 1)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method != "/etcdserverpb.KV/Txn" || readOnly(req.(*pb.TxnRequest)) || !armed.CompareAndSwap(true, false) {
				return inv(ctx, method, req, reply, cc, opts...)
			}
			late <- func() { inv(context.Background(), method, req, new(pb.TxnResponse), cc) }
			dead, kill := context.WithCancel(ctx)
			kill()
			return inv(dead, method, req, reply, cc, opts...)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	d, _ := newDriver(&Options{Prefix: prefix})
	d.c = c
	defer d.Close()
	d2, _ := testDriver(t, e)
	d2.prefix = d.prefix
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Second)
	defer cancel()
	k := "audit47-grant"
	a := &driver.Lease{Key: k, Owner: slotOwner(1), TTL: 2 * time.Second}
	armed.Store(true)
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	if armed.Load() {
		t.Skip("the grant sent no write KV/Txn")
	}
	if err := d.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	(<-late)() // the first try of a's write lands
	if got, err := c.Get(ctx, d.names(k).queue, clientv3.WithPrefix()); err == nil {
		for _, kv := range got.Kvs {
			t.Logf("after the late try: %s = %q (lease %x)", kv.Key, kv.Value, kv.Lease)
		}
	}
	// the Locker goes on with grants of another key (renewing its spares)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		l := &driver.Lease{Key: "audit47-other", Owner: newOwnerForTest(), TTL: 2 * time.Second}
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := d.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	o := &driver.Lease{Key: k, Owner: slotOwner(3), TTL: 2 * time.Second}
	tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
	defer tcancel()
	if err := d2.Acquire(tctx, o); err != nil {
		t.Fatalf("5 s after the only grant of %s was released, another client cannot take it: %v", k, err)
	}
	d2.Release(ctx, o)
}

var testOwnerN atomic.Int64

func newOwnerForTest() string { return fmt.Sprintf("%032x", 0x4747000+testOwnerN.Add(1)) }

// TestAudit47ResumedElsewhere: a grant resumed and released by another
// Locker, then a later grant of the first Locker on the key; the first
// Locker's stale handle of the released grant, released now, must not
// delete the later grant (whether or not the holder watch freed the
// slot and the later grant took the name).
func TestAudit47ResumedElsewhere(t *testing.T) {
	e := testserver.SharedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, watched := range []bool{false, true} {
		da, _ := testDriver(t, e)
		db, rb := testDriver(t, e)
		db.prefix = da.prefix
		k := fmt.Sprintf("audit47-resumed-%v", watched)
		a := &driver.Lease{Key: k, Owner: newOwnerForTest(), TTL: 10 * time.Second}
		if watched {
			a.Lost = func(error) {}
		}
		if err := da.Acquire(ctx, a); err != nil {
			t.Fatal(err)
		}
		b := &driver.Lease{Key: k, Owner: a.Owner, Mode: a.Mode, Limit: a.Limit, Token: a.Token, TTL: 10 * time.Second}
		if err := db.Resume(ctx, b); err != nil {
			t.Fatal(err)
		}
		rb.reset()
		if err := db.Release(ctx, b); err != nil {
			t.Fatal(err)
		}
		if got := rb.reset(); got["/etcdserverpb.KV/DeleteRange"] != 0 {
			t.Errorf("a release of a grant resumed from another Locker sent a plain delete: %v", got)
		}
		time.Sleep(300 * time.Millisecond) // a's holder watch, if any, sees the deletion
		a2 := &driver.Lease{Key: k, Owner: newOwnerForTest(), TTL: 10 * time.Second}
		if err := da.Acquire(ctx, a2); err != nil {
			t.Fatal(err)
		}
		t.Logf("watched=%v: a's name %s, a2's %s", watched, a.Data.(grantRef).name, a2.Data.(grantRef).name)
		if err := da.Release(ctx, a); err == nil {
			t.Errorf("watched=%v: the stale handle's release went through", watched)
		}
		if _, errs := da.RefreshBatch(ctx, []*driver.Lease{a2}, 10*time.Second); errs[0] != nil {
			t.Fatalf("watched=%v: the later grant was deleted by the stale handle's release: %v", watched, errs[0])
		}
		if err := da.Release(ctx, a2); err != nil {
			t.Fatal(err)
		}
	}
}
