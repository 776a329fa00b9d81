package etcd

import (
	"context"
	"errors"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// conn is the driver's access to a client: every request fails at once
// with the connection's error while no member can be reached (gRPC's
// WaitForReady off: clientv3 waits for a connection until the context
// ends, and would hide why, a certificate refused, say), so a call fails
// within the client's dial timeout with no deadline of its own.
type conn struct {
	client *clientv3.Client
	raw    *grpc.ClientConn
	kv     clientv3.KV
	pkv    failFastKV // for transactions built as requests (txn)
	lease  pb.LeaseClient
}

func newConn(c *clientv3.Client) *conn {
	raw := c.ActiveConnection()
	pkv := failFastKV{pb.NewKVClient(raw)}
	return &conn{
		client: c,
		raw:    raw,
		pkv:    pkv,
		kv:     clientv3.NewKVFromKVClient(pkv, c),
		lease:  pb.NewLeaseClient(raw),
	}
}

var failFast = grpc.WaitForReady(false)

// bigReplies lifts gRPC's 4 MiB bound on a reply, as clientv3 does: a
// queue read may be larger.
var bigReplies = grpc.MaxCallRecvMsgSize(math.MaxInt32)

// failFastKV adds failFast to every KV call (clientv3's KV takes no call
// options of its own), and bounds it (bound.go): a read is sent again
// when a try times out or finds its member unavailable, a write is made
// once.
type failFastKV struct{ pb.KVClient }

func (k failFastKV) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (out *pb.RangeResponse, err error) {
	err = retried(ctx, func(ctx context.Context) error {
		out, err = k.KVClient.Range(ctx, in, append(opts, failFast)...)
		return err
	})
	return out, err
}

func (k failFastKV) Put(ctx context.Context, in *pb.PutRequest, opts ...grpc.CallOption) (out *pb.PutResponse, err error) {
	err = once(ctx, func(ctx context.Context) error {
		out, err = k.KVClient.Put(ctx, in, append(opts, failFast)...)
		return err
	})
	return out, err
}

func (k failFastKV) DeleteRange(ctx context.Context, in *pb.DeleteRangeRequest, opts ...grpc.CallOption) (out *pb.DeleteRangeResponse, err error) {
	err = once(ctx, func(ctx context.Context) error {
		out, err = k.KVClient.DeleteRange(ctx, in, append(opts, failFast)...)
		return err
	})
	return out, err
}

func (k failFastKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (out *pb.TxnResponse, err error) {
	try := once
	if readOnly(in) {
		try = retried
	}
	err = try(ctx, func(ctx context.Context) error {
		out, err = k.KVClient.Txn(ctx, in, append(opts, failFast)...)
		return err
	})
	return out, err
}

// Txn starts a transaction (one KV/Txn).
func (c *conn) Txn(ctx context.Context) clientv3.Txn { return c.kv.Txn(ctx) }

// txn sends a transaction built as a request (one KV/Txn), with no
// clientv3 builder in between: the steps of every cycle (fast.go,
// Release) build theirs so, for fewer allocations.
func (c *conn) txn(ctx context.Context, req *pb.TxnRequest) (*clientv3.TxnResponse, error) {
	resp, err := c.pkv.Txn(ctx, req, bigReplies)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	return (*clientv3.TxnResponse)(resp), nil
}

// Grant makes a lease of sec seconds (one Lease/LeaseGrant, sent again
// when a try times out: a lease the first try made goes unused, and
// expires after sec seconds).
func (c *conn) Grant(ctx context.Context, sec int64) (int64, error) {
	var resp *pb.LeaseGrantResponse
	err := retried(ctx, func(tctx context.Context) (err error) {
		resp, err = c.lease.LeaseGrant(tctx, &pb.LeaseGrantRequest{TTL: sec}, failFast)
		return err
	})
	if err != nil {
		return 0, ctxErr(ctx, err)
	}
	if resp.Error != "" {
		return 0, errors.New("etcd: lease grant: " + resp.Error)
	}
	return resp.ID, nil
}

// Revoke revokes a lease (one Lease/LeaseRevoke, sent again when a try
// times out: a second revocation finds the lease gone).
func (c *conn) Revoke(ctx context.Context, id int64) error {
	err := retried(ctx, func(tctx context.Context) error {
		_, err := c.lease.LeaseRevoke(tctx, &pb.LeaseRevokeRequest{ID: id}, failFast)
		return err
	})
	return ctxErr(ctx, err)
}

// ctxErr joins ctx's error to err when ctx ended: gRPC reports it as a
// status, which errors.Is does not match with context's errors.
func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return errors.Join(err, ctx.Err())
	}
	return err
}

// get reads one key (a KV/Txn, which clientv3 does not retry: a Range
// it would, for a while, when no member answers).
func (c *conn) get(ctx context.Context, key string) ([]*mvccpb.KeyValue, int64, error) {
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, 0, err
	}
	return resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision, nil
}
