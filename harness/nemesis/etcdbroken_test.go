package nemesis

import (
	"context"
	"strings"

	"github.com/dlock-go/dlock/driver/etcd"
	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Negative controls on etcd, for TestTeeth: the etcd driver itself over a
// client whose gRPC connection a unary interceptor tampers with, so that
// the driver's code is unchanged and only what it reads or writes is not
// what etcd holds:
//
//   - etcd-blind: the reads of a key's queue (a range over its prefix)
//     leave out the granted entries: a waiter sees no holder ahead of it
//     and grants itself the key (the counter's compare passes: no grant
//     came between its read and its write).
//
// A grant whose transaction loses its compares on the waiter's own entry
// (its create revision and lease, the etcd-io/etcd#11456 hole) is not
// among them: the nemesis found nothing in 20 s, as the driver reads its
// own entry just before (a race of milliseconds); driver/etcd's
// TestWaiterLeaseExpired is the test that reaches it.
var etcdBroken = []struct {
	name, breaks string
	tamper       grpc.UnaryClientInterceptor
}{
	{"etcd-blind", "the reads of a key's queue miss its granted entries", blindQueue},
}

func init() {
	for _, b := range etcdBroken {
		t := *TargetByName("etcd")
		t.Name, t.Broken, t.AllFaults = "ctl-"+b.name, b.breaks, false
		t.opener = func(ctx context.Context, addrs []string, o lock.Options) (Locker, error) {
			c, err := clientv3.New(clientv3.Config{
				Endpoints: addrs, Username: chaos.EtcdAppUser, Password: chaos.EtcdAppPassword, Logger: zap.NewNop(),
				DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(b.tamper)},
			})
			if err != nil {
				return nil, err
			}
			return ownedBy(etcd.New(c, &etcd.Options{Options: o, Prefix: etcdPrefix}), c), nil
		}
		targets = append(targets, &t)
	}
}

// blindQueue drops the granted entries (a token other than 0) from a
// Txn's ranges over a prefix.
func blindQueue(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	in, ok1 := req.(*pb.TxnRequest)
	out, ok2 := reply.(*pb.TxnResponse)
	if err != nil || !ok1 || !ok2 {
		return err
	}
	ops := in.Success
	if !out.Succeeded {
		ops = in.Failure
	}
	for i, op := range ops {
		rr := op.GetRequestRange()
		if rr == nil || len(rr.RangeEnd) == 0 || i >= len(out.Responses) {
			continue
		}
		rng := out.Responses[i].GetResponseRange()
		if rng == nil {
			continue
		}
		kvs := rng.Kvs[:0]
		for _, kv := range rng.Kvs {
			if f := strings.Fields(string(kv.Value)); len(f) >= 4 && f[0] == "dlock1" && f[3] != "0" {
				continue // granted: hidden
			}
			kvs = append(kvs, kv)
		}
		rng.Kvs, rng.Count = kvs, int64(len(kvs))
	}
	return nil
}
