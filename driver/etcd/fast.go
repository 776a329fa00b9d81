package etcd

import (
	"context"
	"math"
	"time"

	"github.com/dlock-go/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// counterWidth is the width of a counter's value: the token in decimal
// with leading zeros (20 digits hold every uint64), so that etcd's
// compare of values, which is bytewise, compares counters as numbers.
// A counter written otherwise (by a client before this format: no
// leading zero) compares as above every clock reading, so the fast grant
// fails and the grant reads it first, as before.
const counterWidth = 20

// counterValue is the counter's value for token v.
func counterValue(v uint64) string {
	var b [counterWidth]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[:])
}

// fastGrant tries the grant in one KV/Txn, with no read before it, on a
// spare lease (spares.go): if the key's queue is empty (no key under its
// prefix: CreateRevision(prefix) = 0, a range compare that holds when
// the range is empty) and the counter's value is below the clock in µs
// (a value compare: counterWidth), it puts the entry, granted with the
// clock as its token, and the counter; else it reads the queue and the
// counter, which the caller's rule then reads in place of its own read.
// It is sent once, to have a definite reply: after an error the lease's
// outcome is unknown and lock's clean-up revokes it (pending). st is nil
// when there was no spare, or the spare or the counter lease is gone.
func (d *etcdDriver) fastGrant(ctx context.Context, c *conn, n names, l *driver.Lease, name string) (granted bool, st *state, err error) {
	t := d.takeSpare(l.Owner, seconds(l.TTL))
	if t.id == 0 {
		return false, nil, nil
	}
	cl, err := d.counterLease(ctx, c)
	if err != nil {
		d.putBack(l.Owner, t)
		return false, nil, err
	}
	now := d.wall().UnixMicro()
	token := uint64(max(now, 0))
	if token == 0 || token == math.MaxUint64 {
		d.putBack(l.Owner, t)
		return false, nil, nil
	}
	v := entryValue{mode: l.Mode, named: l.Reentry, limit: l.Limit, token: token, since: now, owner: ownerField(l), holds: holdsOf(l), note: l.Note}
	key, value := n.queue+name, v.String()
	cv := counterValue(token)
	req := &pb.TxnRequest{
		Compare: []*pb.Compare{cmpCreate(n.queue, clientv3.GetPrefixRangeEnd(n.queue), pb.Compare_EQUAL, 0), cmpValueLess(n.counter, cv)},
		Success: []*pb.RequestOp{opPut(key, value, t.id), opPut(n.counter, cv, cl)},
		Failure: []*pb.RequestOp{opQueue(n.queue, 0), opGet(n.counter)},
	}
	txn := func(ctx context.Context) (*clientv3.TxnResponse, error) { return c.txn(ctx, req) }
	resp, rev, tries, err := fastTxn(ctx, txn, key, t.id, value)
	switch {
	case isLeaseNotFound(err):
		// The spare, keyless and so revocable by anyone who may read,
		// or the counter's lease is gone: the caller reads and grants
		// on a lease of its own, whose write drops the counter's lease
		// if that was the one (grantWrite). Dropping it here would leave
		// a live 7-day lease behind for each revoked spare.
		return false, nil, nil
	case err != nil:
		return false, nil, err // unknown: lock's clean-up revokes the spare (pending)
	case rev != 0:
		d.granted(l, n, grantRef{name: name, create: rev}, token, rev, t) // the queue was empty: the entry was made at rev
		return true, nil, nil
	case tries > 1:
		// an earlier try may land later: revoked, it cannot
		if err := revoke(ctx, c, t.id); err != nil {
			return false, nil, err
		}
	default:
		d.putBack(l.Owner, t)
	}
	return false, parseState(n, resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs), nil
}

// fastTxn sends txn, a fast write of key with value on lease, and sends
// it again (to the next member) when a try timed out or found its member
// unavailable, as grantWrite does; rev is the grant's revision when it
// was made, by the last try or by an earlier one whose reply was lost
// (the Else branch's first range then holds key on lease with value).
func fastTxn(ctx context.Context, txn func(context.Context) (*clientv3.TxnResponse, error), key string, lease int64, value string) (resp *clientv3.TxnResponse, rev int64, try int, err error) {
	for try = 1; ; try++ {
		resp, err = txn(ctx)
		switch {
		case err != nil && (ctx.Err() != nil || try == tries || !again(err)):
			return nil, 0, try, err
		case err != nil:
			continue
		case resp.Succeeded:
			return resp, resp.Header.Revision, try, nil
		}
		for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
			if try > 1 && string(kv.Key) == key && landed([]*mvccpb.KeyValue{kv}, lease, value) {
				return resp, kv.ModRevision, try, nil
			}
		}
		return resp, 0, try, nil
	}
}

// fastStep is a woken exclusive waiter's step in one KV/Txn, on a lease
// of the grant's TTL taken for it (a spare, or one made in this call):
// if ws's entry is still the one it made, on its lease (so its place
// never lapsed), no entry is ahead of it (every key under the prefix was
// created at or after it: CreateRevision(prefix) >= its own, a range
// compare), and the counter is below the clock in µs, it moves the entry
// to that lease, granted, and writes the counter. The waiting lease
// needs no renewal then: the grant's lease is sure to last its validity
// from this call. Else it reads the queue up to ws's entry and the
// counter, for the step that renews the waiting lease and reads that
// state in place of its own read. Sent once: after an error the write's
// outcome is unknown, and the wait rides it out (ride) with the lease
// marked unsure, for the next Check to revoke before anything else (or
// Leave: it is pending). st is nil when the lease could not be taken or
// is gone.
func (d *etcdDriver) fastStep(ctx context.Context, c *conn, n names, l *driver.Lease, ws *waitState) (granted bool, st *state, err error) {
	t, err := d.takeLease(ctx, c, l.Owner, seconds(l.TTL))
	if err != nil {
		return false, nil, nil // the step's own requests tell
	}
	cl, err := d.counterLease(ctx, c)
	if err != nil {
		d.putBack(l.Owner, t)
		return false, nil, nil
	}
	now := d.wall().UnixMicro()
	token := uint64(max(now, 0))
	key := n.queue + ws.name
	v := entryValue{mode: l.Mode, limit: l.Limit, token: token, since: now, owner: l.Owner, note: l.Note}
	value := v.String()
	cv := counterValue(token)
	req := &pb.TxnRequest{
		Compare: []*pb.Compare{
			cmpCreate(key, "", pb.Compare_EQUAL, ws.create),
			cmpLease(key, ws.lease),
			cmpCreate(n.queue, clientv3.GetPrefixRangeEnd(n.queue), pb.Compare_GREATER, ws.create-1), // none created before it
			cmpValueLess(n.counter, cv),
		},
		Success: []*pb.RequestOp{opPut(key, value, t.id), opPut(n.counter, cv, cl)},
		Failure: []*pb.RequestOp{opQueue(n.queue, ws.create), opGet(n.counter)},
	}
	txn := func(ctx context.Context) (*clientv3.TxnResponse, error) { return c.txn(ctx, req) }
	resp, rev, tries, err := fastTxn(ctx, txn, key, t.id, value)
	switch {
	case isLeaseNotFound(err): // as in fastGrant
		return false, nil, nil
	case err != nil:
		ws.unsure = t.id // revoked by the next Check, or by Leave (pending)
		return false, nil, d.ride(ctx, ws, err)
	case rev != 0:
		d.endWait(l.Owner, ws)
		d.granted(l, n, grantRef{name: ws.name, create: ws.create}, token, rev, t)
		if !ws.leaseExp.IsZero() { // the entry left it: the waiting lease has no key
			d.putBack(l.Owner, taken{id: ws.lease, sec: ws.leaseSec, expires: ws.leaseExp})
		}
		return true, nil, nil
	case tries > 1:
		ws.unsure = t.id // an earlier try may land later: the next Check revokes it first
		return false, nil, &driver.HeldError{RetryAfter: 10 * time.Millisecond}
	default:
		d.putBack(l.Owner, t)
	}
	return false, parseState(n, resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs), nil
}

// fastStepFits reports whether ws's step may be fastStep: an exclusive
// wait, placed, whose grant moves to a lease of its own TTL.
func fastStepFits(l *driver.Lease, ws *waitState) bool {
	return l.Mode == driver.Exclusive && !l.Reentry && ws.create != 0 && ws.leaseSec != seconds(l.TTL)
}
