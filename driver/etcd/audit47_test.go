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
// land. A release's plain KV/DeleteRange then has a definite reply (the
// second try's) though its first copy is in flight: the slot must be
// burnt, or the Locker's next grant takes the name and the late copy
// deletes it (two holders). Here the first try of the release's
// DeleteRange fails with Canceled at once and its request reaches etcd
// after the next grant under the name was made.
func TestAudit47RetriedDeleteLandsLate(t *testing.T) {
	e := testserver.SharedEtcd(t)
	var armed atomic.Bool
	late := make(chan func(), 1)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method != "/etcdserverpb.KV/DeleteRange" || !armed.CompareAndSwap(true, false) {
				return inv(ctx, method, req, reply, cc, opts...)
			}
			// the try's request is held in the network and lands later;
			// its stream is reset now
			late <- func() { inv(context.Background(), method, req, new(pb.DeleteRangeResponse), cc) }
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
		t.Fatal("the release sent no KV/DeleteRange")
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
