package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The driver's requests, one gRPC method each: KV/Txn (reads and every
// write), Lease/LeaseGrant, Lease/LeaseRevoke, Lease/LeaseKeepAlive (one
// stream per batch), and the Locker's one Watch/Watch stream.

// read gets a lock key's queue (by create revision) and counter in one
// KV/Txn, at one revision; with upTo set, only the entries created at or
// before that revision: a waiter's step needs those ahead of it and its
// own, not the queue behind it.
func (d *etcdDriver) read(ctx context.Context, c *conn, n names, upTo int64) (*state, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	if upTo > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(upTo))
	}
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(n.queue, opts...), clientv3.OpGet(n.counter)).Commit()
	if err != nil {
		return nil, err
	}
	return parseState(n, resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs), nil
}

func parseState(n names, rev int64, queue, counter []*mvccpb.KeyValue) *state {
	st := &state{rev: rev}
	for _, kv := range queue {
		st.entries = append(st.entries, parseEntry(n, kv))
	}
	if len(counter) == 1 {
		st.counterMod = counter[0].ModRevision
		st.counter = parseCounter(string(counter[0].Value))
	}
	return st
}

// parseCounter reads a counter's value; one past the largest token reads
// as the largest (no grant is left above it), not modulo 2^64.
func parseCounter(s string) uint64 {
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		if v > (math.MaxUint64-uint64(c-'0'))/10 {
			return math.MaxUint64
		}
		v = v*10 + uint64(c-'0')
	}
	return v
}

func parseEntry(n names, kv *mvccpb.KeyValue) entry {
	e := entry{
		name:   strings.TrimPrefix(string(kv.Key), n.queue),
		create: kv.CreateRevision,
		mod:    kv.ModRevision,
		lease:  kv.Lease,
	}
	v, ok := parseValue(string(kv.Value))
	switch {
	case ok && !v.named && driver.IsOwner(e.name):
		e.v, e.dlockAnon, e.modeForGrants = v, true, v.mode
	case ok && v.named && strings.HasPrefix(e.name, "o-") && len(e.name) == 2+driver.NamedOwnerLen:
		e.v, e.dlockNamed = v, true
	default:
		e.foreign = true
	}
	return e
}

// grantLease makes a lease of sec seconds for owner's attempt, and
// records it until the attempt ends (a clean-up revokes it: a request of
// the attempt that lands late then fails for want of its lease).
func (d *etcdDriver) grantLease(ctx context.Context, c *conn, owner string, sec int64) (int64, error) {
	id, err := c.Grant(ctx, sec)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	d.pending[owner] = append(d.pending[owner], id)
	d.mu.Unlock()
	return id, nil
}

// settled forgets owner's leases: the attempt ended, granted or not.
func (d *etcdDriver) settled(owner string) {
	d.mu.Lock()
	delete(d.pending, owner)
	d.mu.Unlock()
}

// revoke revokes leases, ignoring those already gone.
func revoke(ctx context.Context, c *conn, ids ...int64) error {
	var errs []error
	for _, id := range ids {
		if id == 0 {
			continue
		}
		if err := c.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func isLeaseNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "requested lease not found")
}

// keepAlive renews leases on one LeaseKeepAlive stream (a request per
// lease, then the replies, in order) and returns each lease's TTL as
// applied: 0 for a lease that is gone. The server renews each lease to
// its whole TTL from the moment it handles the request, after it was
// sent. A try that times out (bound.go) is made again on a new stream,
// which goes to the next member: a renewal sent twice does no harm.
func keepAlive(ctx context.Context, c *conn, ids []int64) (out map[int64]int64, err error) {
	err = retried(ctx, func(tctx context.Context) error {
		out, err = keepAliveOnce(tctx, c, ids)
		return err
	})
	return out, err
}

func keepAliveOnce(ctx context.Context, c *conn, ids []int64) (map[int64]int64, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	s, err := c.lease.LeaseKeepAlive(ctx, failFast)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := s.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
			return nil, errors.Join(err, ctx.Err())
		}
	}
	if err := s.CloseSend(); err != nil {
		return nil, err
	}
	out := make(map[int64]int64, len(ids))
	for range ids {
		resp, err := s.Recv()
		if err != nil {
			return nil, errors.Join(err, ctx.Err())
		}
		out[resp.ID] = resp.TTL
	}
	return out, nil
}

// ownerField is the OWNER of l's entry's value: its owner, for an
// anonymous entry.
func ownerField(l *driver.Lease) string {
	if l.Reentry {
		return ""
	}
	return l.Owner
}

// grantWrite writes l's entry (name), granted with the next token, and the
// counter (on the counter lease), in one KV/Txn, if cmps and the
// counter's revision hold; a write refused for a lease that is gone
// (this one or the counter's, see counter.go) is the caller's to make
// again on a new lease. A try
// that timed out or found its member unavailable is sent again (to the
// next member): if the first landed, the second finds the counter moved
// and reads the entry, which is then l's, on lease, with this value.
func (d *etcdDriver) grantWrite(ctx context.Context, c *conn, n names, name string, st *state, l *driver.Lease, lease int64, holds []string, cmps ...clientv3.Cmp) (ok bool, rev int64, token uint64, err error) {
	if st.counter == math.MaxUint64 {
		return false, 0, 0, fmt.Errorf("etcd: the counter %s is at the largest token: no grant can take a higher one", n.counter)
	}
	now := d.wall().UnixMicro()
	token = nextToken(st.counter, now)
	v := entryValue{mode: l.Mode, named: l.Reentry, limit: l.Limit, token: token, since: now, owner: ownerField(l), holds: holds, note: l.Note}
	key, value := n.queue+name, v.String()
	cl, err := d.counterLease(ctx, c)
	if err != nil {
		return false, 0, 0, err
	}
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(n.counter), "=", st.counterMod))
	for try := 1; ; try++ {
		resp, err := c.Txn(ctx).If(cmps...).Then(
			clientv3.OpPut(key, value, clientv3.WithLease(clientv3.LeaseID(lease))),
			clientv3.OpPut(n.counter, counterValue(token), clientv3.WithLease(clientv3.LeaseID(cl))),
		).Else(clientv3.OpGet(key)).Commit()
		if isLeaseNotFound(err) {
			d.dropCounterLease(cl) // it, or lease, is gone: the caller tries again
		}
		switch {
		case err != nil && (ctx.Err() != nil || try == tries || !again(err)):
			return false, 0, 0, err
		case err != nil:
			continue
		case resp.Succeeded:
			return true, resp.Header.Revision, token, nil
		case try > 1 && landed(resp.Responses[0].GetResponseRange().Kvs, lease, value):
			return true, resp.Responses[0].GetResponseRange().Kvs[0].ModRevision, token, nil
		}
		return false, 0, 0, nil
	}
}

// landed reports whether kvs is the entry an earlier try wrote: on its
// lease, with its value (its token and time).
func landed(kvs []*mvccpb.KeyValue, lease int64, value string) bool {
	return len(kvs) == 1 && kvs[0].Lease == lease && string(kvs[0].Value) == value
}

// errDeleted ends a lease whose entry was deleted.
var errDeleted = errors.New("etcd: the lease's key was deleted (expired, released through another Lease, or removed behind the lock's back)")

// granted fills l for a grant of ref's entry (its lease t) made at
// revision rev, and watches its entry from the next revision (see
// watchHolder).
func (d *etcdDriver) granted(l *driver.Lease, n names, ref grantRef, token uint64, rev int64, t taken) {
	ref.lease = t.id
	l.Token, l.Data = token, ref
	l.Validity = t.validity(l.TTL) // a lease made in the call lasts seconds(TTL) ≥ TTL from the request
	d.settled(l.Owner)
	d.keep(t)
	d.watchHolder(l, n, rev+1)
}

// holderWatchDelay is how long after a grant its entry's watch is
// created. The watch starts at the revision after the grant, so a
// deletion meanwhile is still seen, when it is created (etcd sends the
// events since that revision); a grant released sooner (most, in a busy
// lock) needs no watch at all, and costs the watch stream and etcd
// nothing. A deletion is then reported within this delay at worst,
// where C6 allows a renewal period and more.
const holderWatchDelay = 100 * time.Millisecond

// holderWatch is a grant's watch on its entry: a timer until it is
// created, then its id. d.mu guards id.
type holderWatch struct {
	timer *time.Timer
	id    int64
}

// watchHolder watches l's entry (n's, from revision from), from
// holderWatchDelay on: a deletion ends the lease at once.
func (d *etcdDriver) watchHolder(l *driver.Lease, n names, from int64) {
	owner, lost := l.Owner, l.Lost
	ref, _ := l.Data.(grantRef)
	key := n.queue + ref.name
	end := func() {
		d.dropHolder(owner)
		d.unreserve(owner) // the grant's entry is gone: its slot is free
		if lost != nil {
			lost(errDeleted)
		}
	}
	fn := func(deleted bool) {
		if deleted {
			end()
		}
	}
	// made from the revision after the grant, the watch may find it
	// compacted, maybe past a deletion: then the entry is read
	compacted := func() { d.checkHolder(key, ref, end) }
	h := &holderWatch{}
	d.mu.Lock()
	old := d.holders[owner]
	d.holders[owner] = h
	h.timer = time.AfterFunc(holderWatchDelay, func() {
		// The watch is made without d.mu: its create may wait on the
		// watch stream, and every call takes d.mu.
		d.mu.Lock()
		live := d.holders[owner] == h
		d.mu.Unlock()
		if !live {
			return
		}
		id := d.w.addCompacted(key, "", from, fn, compacted)
		d.mu.Lock()
		live = d.holders[owner] == h
		if live {
			h.id = id
		}
		d.mu.Unlock()
		if !live { // ended meanwhile, before its id was known
			d.w.remove(id)
		}
	})
	d.mu.Unlock()
	if old != nil {
		d.endHolder(old)
	}
}

// checkHolder reads a holder's entry, key, after its watch found its
// revision compacted, and calls end when it is gone, or is another
// generation (the name reused) or no longer on the holder's lease: a
// deletion the watch may have missed. A read that fails leaves it to the
// renewal, which finds the entry gone too.
func (d *etcdDriver) checkHolder(key string, ref grantRef, end func()) {
	c, err := d.client()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), maxTry)
	defer cancel()
	kvs, _, err := c.get(ctx, key)
	if err != nil {
		return
	}
	if len(kvs) == 0 || kvs[0].CreateRevision != ref.create || kvs[0].Lease != ref.lease {
		end()
	}
}

// dropHolder ends owner's watch on its entry.
func (d *etcdDriver) dropHolder(owner string) {
	d.mu.Lock()
	h := d.holders[owner]
	delete(d.holders, owner)
	d.mu.Unlock()
	if h != nil {
		d.endHolder(h)
	}
}

// endHolder stops h, no longer in d.holders: its timer, or its watch.
func (d *etcdDriver) endHolder(h *holderWatch) {
	h.timer.Stop()
	d.mu.Lock()
	id := h.id
	d.mu.Unlock()
	if id != 0 {
		d.w.remove(id)
	}
}
