//go:build !chaos_skip_etcd

package chaos

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver/etcd"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// etcd's least lease TTL is a second (rounded up to whole seconds); a
// lease outlives a holder that stopped renewing by its TTL, or, across
// an election, by up to twice it (the new leader renews every lease).
func init() {
	register(&target{
		name: "etcd", backend: EtcdBackend, ttl: time.Second, bound: 2 * time.Second,
		open: openURL("etcd://%s/chaos"),
		// The proxy decodes each Txn (proto_grpc.go): a grant writes the
		// key's counter ("c/") with the entry; a release deletes the
		// entry; a refresh is a keep-alive message (the entries' reads
		// come with it, and are not mutating).
		grantReq: func(r Request) bool {
			return r.Cmd == "Txn" && slices.Contains(r.Args, "put-lease") && slices.ContainsFunc(r.Paths, etcdCounter)
		},
		releaseReq: func(r Request) bool { return r.Cmd == "Txn" && slices.Contains(r.Args, "del") },
		refreshReq: func(r Request) bool { return r.Cmd == "LeaseKeepAlive" },
	})
	// A negative control: the etcd driver over a client whose reads of a
	// key's queue miss the granted entries, so a waiter sees no holder
	// ahead of it and grants itself the key.
	register(&target{
		name: "etcd-blind", backend: EtcdBackend, control: true, ttl: time.Second, bound: 2 * time.Second,
		open: func(ctx context.Context, addrs []string, ttl time.Duration, h Hooks) (Locker, error) {
			c, err := clientv3.New(clientv3.Config{
				Endpoints: addrs, Logger: zap.NewNop(),
				DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(blindQueue)},
			})
			if err != nil {
				return nil, err
			}
			return &ownedLocker{etcd.New(c, &etcd.Options{Options: lock.Options{TTL: ttl}, Prefix: "chaos/"}), c}, nil
		},
		catches: map[string]func(Row) error{"etcd/leader-loss": caughtUnsafeOverlap, "partition": caughtUnsafeOverlap},
	})
}

func etcdCounter(p string) bool { return strings.Contains(p, "/c/") }

// ownedLocker closes its etcd client after itself.
type ownedLocker struct {
	*lock.Locker
	c *clientv3.Client
}

func (o *ownedLocker) Close() error {
	err := o.Locker.Close()
	o.c.Close()
	return err
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
		if rr == nil || len(rr.RangeEnd) == 0 || i >= len(out.Responses) || out.Responses[i].GetResponseRange() == nil {
			continue
		}
		rng := out.Responses[i].GetResponseRange()
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
