package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// One bad member of a cluster (paused, cut off with its connection open,
// slow) must not cost a call more than a part of its time: gRPC's
// round-robin sends every third request to it, and a request it holds
// would hold the call until the call's context ends (a renewal's is the
// lease's validity; a waiter's step may have none). So every request is
// bounded by a part of what is left of its context (tryBound), and one
// that can be sent again without harm (a read, a keep-alive, a lease's
// grant or revocation) is sent again when its try timed out or found its
// member unavailable: the next try goes to the next member. A write's
// outcome is unknown after a timed-out try: it is made once, and its
// caller judges (grantWrite, which can tell its own landed write, sends
// it again; the others leave it to lock's clean-up or the next step).

const (
	// maxTry bounds a request whose context has no deadline, or much
	// time left: etcd answers a healthy request in milliseconds, and one
	// held for an election within a second or two.
	maxTry = 2 * time.Second
	// minTry is the least a try gets while its context has that long.
	minTry = 300 * time.Millisecond
	// tries bounds the tries of a request sent again.
	tries = 3
)

// tryBound is how long one try of a request under ctx may take: a third
// of what is left of ctx, within [minTry, maxTry].
func tryBound(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return maxTry
	}
	left := time.Until(dl)
	return max(min(left/3, maxTry), min(minTry, left))
}

// callKey keys, in a try's context, its call's context.
type callKey struct{}

// tryContext is the context of one try under ctx: bounded by tryBound,
// and carrying ctx for what the try must not cut short (a log-in, which
// takes etcd seconds while roles change: see login).
func tryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	tctx, cancel := context.WithTimeout(ctx, tryBound(ctx))
	return context.WithValue(tctx, callKey{}, ctx), cancel
}

// callContext is the context of the call a try under ctx belongs to
// (ctx itself outside a try).
func callContext(ctx context.Context) context.Context {
	if c, ok := ctx.Value(callKey{}).(context.Context); ok {
		return c
	}
	return ctx
}

// once makes one try of f, bounded by tryBound.
func once(ctx context.Context, f func(context.Context) error) error {
	tctx, cancel := tryContext(ctx)
	defer cancel()
	return f(tctx)
}

// retried makes tries of f, a request that can be sent again without
// harm, each bounded by tryBound, until one answers, or fails for
// another reason than its bound or its member (see again), or ctx ends.
func retried(ctx context.Context, f func(context.Context) error) error {
	for try := 1; ; try++ {
		tctx, cancel := tryContext(ctx)
		err := f(tctx)
		cancel()
		if err == nil || ctx.Err() != nil || try == tries || !again(err) {
			return err
		}
	}
}

// again reports whether a try that failed with err, its call's context
// still alive, is worth sending to another member: its bound ended it
// (DeadlineExceeded), or its member could not serve it (a connection
// lost, no leader, etcd's own request timeout: Unavailable). A member
// whose certificate fails verification is a misconfiguration, which no
// retry mends, though gRPC says Unavailable.
func again(err error) bool {
	if certRefused(err) {
		return false
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	return code == codes.Unavailable || code == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)
}

// certRefused reports whether err says that a member's certificate failed
// verification (a wrong CA or server name). gRPC keeps only the text of
// the handshake's error, which crypto/tls starts so.
func certRefused(err error) bool {
	var cv *tls.CertificateVerificationError
	return errors.As(err, &cv) || strings.Contains(err.Error(), "tls: failed to verify certificate")
}

// unreachable marks err, the failure of a call under ctx, as
// driver.ErrUnavailable when ctx is alive and err says that no member
// could serve the call (see again), or is a network failure.
func unreachable(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && again(err) {
		return driver.Unavailable(err)
	}
	return driver.MarkNetFailure(err)
}

// readOnly reports whether a transaction only reads: sent twice, it
// does no harm.
func readOnly(in *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{in.Success, in.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}
