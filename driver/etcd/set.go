package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/dlock-go/dlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ driver.SetAcquirer = (*etcdDriver)(nil)

// AcquireSet implements driver.SetAcquirer with one KV/Txn that grants
// every key of the set or none:
//
//  1. a read (one KV/Txn at one revision) of every key's queue and
//     counter; a key with any entry (holder, waiter, foreign key) is
//     not free for an exclusive lease, and the set is refused as held
//     before any lease is made;
//  2. a lease per member (a spare, or one made for it, as Acquire's);
//  3. one KV/Txn that, if for every key the queue is still empty
//     (CreateRevision(queue prefix) = 0, a range compare) and the
//     counter's mod revision is the one read, puts every member's entry,
//     granted with its token (max(counter + 1, the clock), as Acquire's),
//     and every counter. A failed compare reads again (at most maxTries).
//
// The entries are Acquire's (name, value, lease): a single-key client,
// of this release or an older one, sees each member as an ordinary
// holder. A write whose reply was lost is sent again and recognised by
// its entries' leases and values (as grantWrite's); when its outcome
// stays unknown, lock's Release of each lease finds the member's entry
// by its reserved name and OWNER and revokes the member's leases, so a
// write that lands later fails for want of its lease.
func (d *etcdDriver) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	if err := driver.CheckSet(ls); err != nil {
		return err
	}
	if 2*len(ls) > txnOps {
		return fmt.Errorf("etcd: a set of %d keys needs %d puts in one transaction, over etcd's default limit of %d: %w", len(ls), 2*len(ls), txnOps, driver.ErrNotAtomic)
	}
	setData(ls, noGrant{}) // nothing sent yet
	c, err := d.client()
	if err != nil {
		return err
	}
	return unreachable(ctx, d.acquireSet(ctx, c, ls))
}

func setData(ls []*driver.Lease, v any) {
	for _, l := range ls {
		l.Data = v
	}
}

func (d *etcdDriver) acquireSet(ctx context.Context, c *conn, ls []*driver.Lease) error {
	ns := make([]names, len(ls))
	for i, l := range ls {
		ns[i] = d.names(l.Key)
	}
	leases := make([]taken, len(ls))
	var entries []string // the members' entry names, once reserved
	clean := true        // no write on the leases has been sent: they can be spares again
	// unheard: a try of an earlier write on these leases had no reply (it
	// may still be on its way, and land once its compares hold again):
	// until the leases are revoked, a later write refused at its only
	// try does not make them clean.
	unheard := false
	// end ends the attempt with no grant: its leases revoked (or kept
	// as spares), nothing of it is left, and lock's clean-up needs no
	// round trip. When a revocation fails, its outcome is lock's to
	// settle (Release revokes each member's leases: pending).
	end := func(err error) error {
		var ids []int64
		for i, t := range leases {
			switch {
			case t.id == 0:
			case clean:
				d.putBack(ls[i].Owner, t)
			default:
				ids = append(ids, t.id)
			}
		}
		if rerr := revoke(ctx, c, ids...); rerr != nil {
			return rerr
		}
		for _, l := range ls {
			d.settled(l.Owner)
			d.unreserve(l.Owner)
		}
		setData(ls, noGrant{})
		return err
	}
	for try := 1; ; try++ {
		sts, err := d.readSet(ctx, c, ns)
		if err != nil {
			if rpctypes.Error(err) == rpctypes.ErrTooManyOps {
				// the server's --max-txn-ops is below this set's
				// transaction: one read refused, nothing written
				err = fmt.Errorf("etcd: a set of %d keys: %v: %w", len(ls), err, driver.ErrNotAtomic)
			}
			if clean || refused(err) || errors.Is(err, driver.ErrNotAtomic) {
				return end(err)
			}
			return err // an earlier write may land: lock's clean-up
		}
		for _, st := range sts {
			if !turn(st.entries, driver.Exclusive, 0) {
				return end(&driver.HeldError{})
			}
		}
		if try > maxTries {
			return end(&driver.HeldError{})
		}
		if entries == nil {
			entries = make([]string, len(ls))
			for i, l := range ls {
				entries[i] = d.reserve(l) // its queue is empty: the name is free
			}
		}
		setData(ls, nil) // from here on, a write may land unheard
		for i, l := range ls {
			if leases[i].id == 0 {
				if leases[i], err = d.takeLease(ctx, c, l.Owner, seconds(l.TTL)); err != nil {
					if clean {
						return end(err) // no write sent: the leases taken are spares again
					}
					return err // an earlier write may land: lock's clean-up revokes the leases (pending)
				}
			}
		}
		clean = false
		ok, rev, toks, sent, err := d.setWrite(ctx, c, ns, entries, sts, ls, leases)
		if rpctypes.Error(err) == rpctypes.ErrRequestTooLarge {
			// the server's --max-request-bytes is below this set's write
			// (each key's grant is far smaller): refused before raft,
			// nothing written
			err = fmt.Errorf("etcd: a set of %d keys: %v: %w", len(ls), err, driver.ErrNotAtomic)
		}
		switch {
		case err != nil && (refused(err) || errors.Is(err, driver.ErrNotAtomic)):
			return end(err)
		case err != nil && isLeaseNotFound(err):
			// a member's lease, or the counter's, was revoked before
			// the write took it: new ones
			if err := end(nil); err != nil {
				return err
			}
			setData(ls, nil)
			clear(leases)
			clean, unheard = true, false // the leases of any write on its way are revoked
			entries = nil
			continue
		case err != nil:
			return err // unknown: lock's clean-up (Release of each lease)
		case ok:
			for i, l := range ls {
				d.granted(l, ns[i], grantRef{name: entries[i], create: rev}, toks[i], rev, leases[i])
			}
			return nil
		case sent == 1 && !unheard:
			clean = true // refused by the compare at its only try, and no earlier try unheard: no write can land
		default:
			unheard = true // an earlier try of this write may still land
		}
	}
}

// readSet reads every queue of ns (by create revision) and its counter,
// in one KV/Txn at one revision.
func (d *etcdDriver) readSet(ctx context.Context, c *conn, ns []names) ([]*state, error) {
	req := &pb.TxnRequest{}
	for _, n := range ns {
		req.Success = append(req.Success, opQueue(n.queue, 0), opGet(n.counter))
	}
	resp, err := c.txn(ctx, req)
	if err != nil {
		return nil, err
	}
	sts := make([]*state, len(ns))
	for i, n := range ns {
		sts[i] = parseState(n, resp.Header.Revision, resp.Responses[2*i].GetResponseRange().Kvs, resp.Responses[2*i+1].GetResponseRange().Kvs)
	}
	return sts, nil
}

// setWrite is the set's one KV/Txn (see AcquireSet): if every queue of ns
// is empty and every counter's mod revision is the one in sts, it puts
// each member's entry (entries[i], on leases[i]), granted with its
// token, and each counter (on the counter lease). A try that timed out
// or found its member unavailable is sent again, as grantWrite's: if an
// earlier try landed, the Else branch's reads find every entry on its
// lease with its value, and the set is granted at the revision that made
// them. sent is how many tries were sent.
func (d *etcdDriver) setWrite(ctx context.Context, c *conn, ns []names, entries []string, sts []*state, ls []*driver.Lease, leases []taken) (ok bool, rev int64, toks []uint64, sent int, err error) {
	cl, err := d.counterLease(ctx, c)
	if err != nil {
		return false, 0, nil, 0, err
	}
	now := d.wall().UnixMicro()
	toks = make([]uint64, len(ls))
	values := make([]string, len(ls))
	req := &pb.TxnRequest{}
	for i, n := range ns {
		if sts[i].counter == math.MaxUint64 {
			return false, 0, nil, 0, fmt.Errorf("etcd: the counter %s is at the largest token: no grant can take a higher one", n.counter)
		}
		toks[i] = nextToken(sts[i].counter, now)
		values[i] = entryValue{mode: driver.Exclusive, token: toks[i], since: now, owner: ls[i].Owner, note: ls[i].Note}.String()
		key := n.queue + entries[i]
		req.Compare = append(req.Compare,
			cmpCreate(n.queue, clientv3.GetPrefixRangeEnd(n.queue), pb.Compare_EQUAL, 0), // nothing in the queue: no holder, no waiter
			cmpMod(n.counter, sts[i].counterMod))
		req.Success = append(req.Success, opPut(key, values[i], leases[i].id), opPut(n.counter, counterValue(toks[i]), cl))
		req.Failure = append(req.Failure, opGet(key))
	}
	for try := 1; ; try++ {
		resp, err := c.txn(ctx, req)
		if isLeaseNotFound(err) {
			d.dropCounterLease(cl) // it, or a member's, is gone: the caller tries again
		}
		switch {
		case err != nil && (ctx.Err() != nil || try == tries || !again(err)):
			return false, 0, nil, try, err
		case err != nil:
			continue
		case resp.Succeeded:
			return true, resp.Header.Revision, toks, try, nil
		case try == 1:
			return false, 0, nil, try, nil
		}
		// an earlier try may have landed: then every entry is there, on
		// its lease, with its value (one transaction: all or none)
		for i := range ls {
			kvs := resp.Responses[i].GetResponseRange().Kvs
			if !landed(kvs, leases[i].id, values[i]) {
				return false, 0, nil, try, nil
			}
			rev = kvs[0].CreateRevision
		}
		return true, rev, toks, try, nil
	}
}
