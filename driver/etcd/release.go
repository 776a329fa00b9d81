package etcd

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/dlock-go/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Release deletes l's entry if it is there (one KV/Txn comparing its
// create revision: the name may be another grant's since), then revokes
// its lease, and any lease an attempt whose reply was lost made (so that
// the attempt's write, if it lands later, fails). After a lost reply
// (l.Data unset) the entry is read first, and deleted only if it names
// l's owner. A named owner's hold is taken out of its grant, which goes
// with the last.
func (d *etcdDriver) Release(ctx context.Context, l *driver.Lease) error {
	if _, ok := l.Data.(noGrant); ok {
		d.unreserve(l.Owner)
		return driver.ErrNotHeld
	}
	c, err := d.client()
	if err != nil {
		return err
	}
	d.dropHolder(l.Owner)
	n := d.names(l.Key)
	if l.Reentry {
		return d.releaseHold(ctx, c, n, l)
	}
	d.mu.Lock()
	leases := slices.Clone(d.pending[l.Owner])
	d.mu.Unlock()
	var prev []*mvccpb.KeyValue
	if name, create, ok := d.entryOf(l); ok {
		if prev, err = deleteOwn(ctx, c, n.queue+name, l.Owner, create); err != nil {
			return err
		}
	}
	defer d.forget(leaseOf(l))
	if len(prev) == 0 {
		if err := revoke(ctx, c, leases...); err != nil {
			return err
		}
		d.settled(l.Owner)
		d.unreserve(l.Owner)
		return driver.ErrNotHeld
	}
	for _, kv := range prev {
		if kv.Lease != leaseOf(l) || !d.reuse(kv.Lease) { // a spare: no key is on it now
			leases = append(leases, kv.Lease)
		}
	}
	revoke(ctx, c, leases...) // the entry is gone; a lease left behind expires by itself
	d.settled(l.Owner)
	d.unreserve(l.Owner)
	return nil
}

// deleteOwn deletes key, an anonymous entry of owner's: the generation
// made at revision create when it is known (one KV/Txn), else the entry
// there if its value names owner (a read, then a delete if it did not
// change). It returns what it deleted (none: no such entry).
func deleteOwn(ctx context.Context, c *conn, key, owner string, create int64) ([]*mvccpb.KeyValue, error) {
	if create != 0 {
		resp, err := c.txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{cmpCreate(key, "", pb.Compare_EQUAL, create)},
			Success: []*pb.RequestOp{opDelete(key, true)},
		})
		if err != nil || !resp.Succeeded {
			return nil, err
		}
		return resp.Responses[0].GetResponseDeleteRange().PrevKvs, nil
	}
	for range maxTries {
		kvs, _, err := c.get(ctx, key)
		if err != nil || len(kvs) == 0 {
			return nil, err
		}
		if v, ok := parseValue(string(kvs[0].Value)); !ok || v.named || v.owner != owner {
			return nil, nil // another's
		}
		resp, err := c.txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{cmpMod(key, kvs[0].ModRevision)},
			Success: []*pb.RequestOp{opDelete(key, true)},
		})
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			return resp.Responses[0].GetResponseDeleteRange().PrevKvs, nil
		}
	}
	return nil, errors.New("etcd: deleting an entry: it kept changing")
}

// releaseHold takes l's hold out of its named owner's grant, deleting the
// grant with the last hold.
func (d *etcdDriver) releaseHold(ctx context.Context, c *conn, n names, l *driver.Lease) error {
	key := n.queue + namedEntry(l)
	for range maxTries {
		kvs, _, err := c.get(ctx, key)
		if err != nil {
			return err
		}
		if len(kvs) == 0 {
			d.settled(l.Owner)
			return driver.ErrNotHeld
		}
		e := parseEntry(n, kvs[0])
		i := slices.Index(e.v.holds, l.Owner)
		if !e.dlockNamed || i < 0 {
			d.settled(l.Owner)
			return driver.ErrNotHeld
		}
		v := e.v
		v.holds = slices.Delete(slices.Clone(v.holds), i, i+1)
		op := clientv3.OpPut(key, v.String(), clientv3.WithIgnoreLease())
		if len(v.holds) == 0 {
			op = clientv3.OpDelete(key)
		}
		tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", e.mod)).Then(op).Commit()
		if err != nil {
			return err
		}
		if tr.Succeeded {
			if len(v.holds) == 0 {
				revoke(ctx, c, e.lease)
			}
			d.settled(l.Owner)
			return nil
		}
	}
	return errors.New("etcd: releasing a hold: the grant kept changing")
}

// Refresh renews l's grant to at least ttl.
func (d *etcdDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	v, errs := d.RefreshBatch(ctx, []*driver.Lease{l}, ttl)
	return v, errs[0]
}

// txnOps is the most operations the driver puts in one transaction
// (etcd's --max-txn-ops defaults to 128).
const txnOps = 128

// RefreshBatch implements driver.BatchRefresher, in one round trip: one
// LeaseKeepAlive stream renews the leases the grants were made with
// (Lease.Data), each to its whole TTL from when the server gets the
// request, after the call began; meanwhile one KV/Txn per 128 leases
// reads their entries (the owner check: the entry is there, and for a
// named owner's hold, lists it). An entry found on another lease (moved
// to a longer one through another Lease of the grant, see lengthen) has
// that lease renewed too, and a lease shorter than ttl is lengthened. A
// lease that is gone, or an entry that is, is ErrNotHeld.
func (d *etcdDriver) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	errs := make([]error, len(ls))
	fill := func(err error) (time.Duration, []error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return 0, errs
	}
	c, err := d.client()
	if err != nil {
		return fill(err)
	}
	var ids []int64
	for _, l := range ls {
		if id := leaseOf(l); id != 0 && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	var ttls map[int64]int64
	var kaErr error
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		if len(ids) > 0 {
			ttls, kaErr = keepAlive(ctx, c, ids)
		}
	}()
	es, keys, err := d.readEntries(ctx, c, ls, errs)
	<-kaDone
	if err != nil {
		return fill(err)
	}
	if kaErr != nil {
		return fill(kaErr)
	}
	var more []int64
	for i := range ls {
		if errs[i] == nil && es[i].lease != leaseOf(ls[i]) && !slices.Contains(more, es[i].lease) {
			more = append(more, es[i].lease)
		}
	}
	if len(more) > 0 {
		got, err := keepAlive(ctx, c, more)
		if err != nil {
			return fill(err)
		}
		for id, ttl := range got {
			ttls[id] = ttl
		}
	}
	sec := seconds(ttl)
	for i := range ls {
		if errs[i] != nil {
			continue
		}
		switch got := ttls[es[i].lease]; {
		case got <= 0:
			errs[i] = driver.ErrNotHeld
		case got < sec:
			errs[i] = d.lengthen(ctx, c, keys[i], es[i], sec)
		}
	}
	return ttl, errs
}

// leaseOf is the lease l's grant was made (or resumed) with.
func leaseOf(l *driver.Lease) int64 {
	ref, _ := l.Data.(grantRef)
	return ref.lease
}

// readEntries reads the entries of ls, in one KV/Txn per 128, and sets
// errs[i] to ErrNotHeld where ls[i] has no grant.
func (d *etcdDriver) readEntries(ctx context.Context, c *conn, ls []*driver.Lease, errs []error) ([]entry, []string, error) {
	es := make([]entry, len(ls))
	keys := make([]string, len(ls))
	for lo := 0; lo < len(ls); lo += txnOps {
		hi := min(lo+txnOps, len(ls))
		ops := make([]clientv3.Op, 0, hi-lo)
		for i := lo; i < hi; i++ {
			name, _, _ := d.entryOf(ls[i])
			keys[i] = d.names(ls[i].Key).queue + name
			ops = append(ops, clientv3.OpGet(keys[i]))
		}
		resp, err := c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, nil, err
		}
		for i := lo; i < hi; i++ {
			kvs := resp.Responses[i-lo].GetResponseRange().Kvs
			if len(kvs) == 0 {
				errs[i] = driver.ErrNotHeld
				continue
			}
			es[i] = parseEntry(d.names(ls[i].Key), kvs[0])
			if !holds(es[i], ls[i]) {
				errs[i] = driver.ErrNotHeld
			}
		}
	}
	return es, keys, nil
}

// holds reports whether e is l's grant: l's own entry, with a token,
// of the generation l's grant made (when l knows it), or a named owner's
// grant that lists l's hold.
func holds(e entry, l *driver.Lease) bool {
	if l.Reentry {
		return e.dlockNamed && slices.Contains(e.v.holds, l.Owner)
	}
	ref, _ := l.Data.(grantRef)
	return e.dlockAnon && e.v.token != 0 && e.owner() == l.Owner && (ref.create == 0 || e.create == ref.create)
}

// extend renews e's lease and lengthens it to sec seconds if it is
// shorter; ErrNotHeld when the lease is gone.
func (d *etcdDriver) extend(ctx context.Context, c *conn, key string, e entry, sec int64) error {
	ttls, err := keepAlive(ctx, c, []int64{e.lease})
	if err != nil {
		return err
	}
	switch got := ttls[e.lease]; {
	case got <= 0:
		return driver.ErrNotHeld
	case got < sec:
		return d.lengthen(ctx, c, key, e, sec)
	}
	return nil
}

// lengthen moves e to a new lease of sec seconds (one LeaseGrant, one
// KV/Txn that changes the entry's lease if it is still e's): an etcd
// lease keeps the TTL it was granted with, and a refresh or Resume with a
// longer TTL must extend the grant to it. The old lease is left to
// expire: another Lease of the grant may be renewing it, and finds the
// entry's new lease at its next refresh.
func (d *etcdDriver) lengthen(ctx context.Context, c *conn, key string, e entry, sec int64) error {
	g, err := c.Grant(ctx, sec)
	if err != nil {
		return err
	}
	lease := clientv3.LeaseID(g)
	resp, err := c.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", e.create),
		clientv3.Compare(clientv3.LeaseValue(key), "=", e.lease),
	).Then(clientv3.OpPut(key, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		revoke(ctx, c, g)
		return driver.ErrNotHeld
	}
	return nil
}

// Resume implements driver.Resumer: it reads l's entry (one KV/Txn: a
// named owner's grant, or the queue, where the entry that names l's
// owner is its grant), checks its mode, limit and token (for a named
// owner's grant, that it lists l's hold), renews its lease (lengthened to
// l's TTL if shorter; never shortened), and watches the entry.
func (d *etcdDriver) Resume(ctx context.Context, l *driver.Lease) error {
	c, err := d.client()
	if err != nil {
		return err
	}
	n := d.names(l.Key)
	e, rev, found, err := d.findGrant(ctx, c, n, l)
	if err != nil {
		return err
	}
	if !found || !holds(e, l) || e.v.token != l.Token || (!l.Reentry && (e.v.mode != l.Mode || e.v.limit != l.Limit)) {
		return driver.ErrNotHeld
	}
	if err := d.extend(ctx, c, n.queue+e.name, e, seconds(l.TTL)); err != nil {
		return err
	}
	l.Validity, l.Data = l.TTL, grantRef{name: e.name, lease: e.lease, create: e.create}
	d.watchHolder(l, n, rev+1)
	return nil
}

// findGrant reads the entry of l's grant: a named owner's by its name,
// an anonymous one as the entry of the queue whose owner is l's.
func (d *etcdDriver) findGrant(ctx context.Context, c *conn, n names, l *driver.Lease) (e entry, rev int64, found bool, err error) {
	if l.Reentry {
		kvs, rev, err := c.get(ctx, n.queue+namedEntry(l))
		if err != nil || len(kvs) == 0 {
			return e, rev, false, err
		}
		return parseEntry(n, kvs[0]), rev, true, nil
	}
	st, err := d.read(ctx, c, n, 0)
	if err != nil {
		return e, 0, false, err
	}
	for _, e := range st.entries {
		if e.dlockAnon && e.owner() == l.Owner {
			return e, st.rev, true, nil
		}
	}
	return e, st.rev, false, nil
}
