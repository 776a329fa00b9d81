package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/go-zookeeper/zk"
)

var _ driver.SetAcquirer = (*zkDriver)(nil)

// errSetNoWrite: the identity may not write the key nodes, so a set's
// tokens cannot come with its multi (see create).
var errSetNoWrite = fmt.Errorf("zookeeper: the key nodes are not writable here (plain creates): %w", driver.ErrNotAtomic)

// AcquireSet implements driver.SetAcquirer: one multi creates every
// lease's node, each with the setData of its key node that create makes
// (so every token is the multi's zxid), all in one transaction: the set
// joins every key's queue at one moment, at the end of each. It is
// granted when, in every queue, nothing before its node blocks it, the
// rule Acquire grants by (judge): the multi's reply tells it when each key
// node has one child, else the queues are listed (sent together, one
// round trip's time). If a key is blocked, every node is deleted (one
// multi) and the set is refused as held: it passed no one, since its
// nodes came last, and whatever it overtakes later, arriving behind it,
// it blocks only until that delete, as a refused Acquire does.
//
// No version check can do the judging inside the multi: ZooKeeper's check
// tests a node's data version, which a dlock create moves but another
// client's (zk.Lock, Curator: a plain create) does not, and not the
// children's version (cversion). So the queue is read after the multi,
// where every node that could come before the set's is already in it.
//
// The multi runs to its end even when ctx ends (lock then returns and
// deals with its outcome when it comes: a grant no one holds is
// released); the steps after it are cut short by ctx, deleting the nodes.
//
// Round trips: 1 when every key is free, 2 when a key has other nodes, 3
// when held. Where the identity may not write the key nodes it returns
// driver.ErrNotAtomic, and lock takes the keys one by one.
func (d *zkDriver) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	if err := driver.CheckSet(ls); err != nil {
		return err
	}
	for _, l := range ls {
		l.Data = nil
	}
	if d.plainCreate.Load() {
		return errSetNoWrite
	}
	if err := d.start.await(ctx); err != nil {
		return err
	}
	begin := time.Now()
	ns, sid, err := d.createSet(ctx, ls)
	if err != nil {
		return err
	}
	granted, err := d.judgeSet(ctx, ls, ns)
	if err == nil && granted {
		err = d.ensureProof(ctx, sid)
	}
	if err != nil || !granted {
		d.discardSet(ls, ns)
		if err != nil {
			return err
		}
		return &driver.HeldError{}
	}
	validity := d.mon.validitySince(begin, sid, d.sessionTimeout())
	for i, l := range ls {
		d.grant(l, ns[i], validity)
	}
	return nil
}

// createSet sends the set's multi (see AcquireSet), creating missing key
// nodes and trying again when one is missing. It returns the nodes, in
// the order of ls, and their session.
func (d *zkDriver) createSet(ctx context.Context, ls []*driver.Lease) ([]node, int64, error) {
	ops := make([]any, 0, 2*len(ls))
	for _, l := range ls {
		kp := d.keyPath(l.Key)
		var data []byte
		if l.Note != "" {
			data = []byte(l.Note)
		}
		ops = append(ops,
			&zk.CreateRequest{Path: kp + "/" + nodePrefix(l.Owner, l.Mode, l.Limit), Data: data, Acl: d.acl, Flags: zk.FlagEphemeral | zk.FlagSequence},
			&zk.SetDataRequest{Path: kp, Version: -1})
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		// Not abandoned when ctx ends: its nodes are known only from its
		// reply (lock waits for it in the background, see AcquireSet).
		sid := d.conn.SessionID()
		res, err := run(d, true, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
		if err == nil {
			if d.conn.SessionID() != sid || len(res) != len(ops) {
				d.discardSet(ls, nil) // a new session: the nodes went with the old one
				return nil, 0, fmt.Errorf("zookeeper: grant set: the session changed: %w", zk.ErrSessionExpired)
			}
			ns := make([]node, len(ls))
			for i := range ls {
				st := res[2*i+1].Stat
				if st == nil {
					d.discardSet(ls, nil)
					return nil, 0, fmt.Errorf("zookeeper: grant set: no stat in the reply to the setData of %s", d.keyPath(ls[i].Key))
				}
				ns[i] = node{path: res[2*i].String, czxid: st.Mzxid, session: sid, alone: st.NumChildren == 1}
			}
			return ns, sid, nil
		}
		first := failedOp(res)
		switch {
		case errors.Is(err, zk.ErrNoAuth) && first >= 0 && first%2 == 1:
			return nil, 0, errSetNoWrite // a key node not writable: nothing changed
		case errors.Is(err, zk.ErrNoNode) && first >= 0 && attempt < 3:
			if err := d.makeSetParents(ctx, ls[first/2:]); err != nil {
				return nil, 0, err
			}
		default:
			return nil, 0, fmt.Errorf("zookeeper: grant set: %w", err)
		}
	}
}

// failedOp returns the index of the first failed operation of a multi's
// reply, or -1.
func failedOp(res []zk.MultiResponse) int {
	for i, r := range res {
		if r.Error != nil {
			return i
		}
	}
	return -1
}

// makeSetParents creates the key nodes of ls that are missing, in
// parallel.
func (d *zkDriver) makeSetParents(ctx context.Context, ls []*driver.Lease) error {
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.makeParents(ctx, d.keyPath(l.Key))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// judgeSet reports whether every node of ns is granted in its key's
// queue (judge), listing the queues the multi's reply left open.
func (d *zkDriver) judgeSet(ctx context.Context, ls []*driver.Lease, ns []node) (bool, error) {
	lists := make([]*future[[]string], len(ns))
	for i, n := range ns {
		if !n.alone {
			kp := d.keyPath(ls[i].Key)
			lists[i] = start(d, false, func() ([]string, error) { c, _, err := d.conn.Children(kp); return c, err })
		}
	}
	granted := true
	for i, n := range ns {
		if lists[i] == nil {
			continue // the key node's only child
		}
		kp := d.keyPath(ls[i].Key)
		children, err := lists[i].wait(ctx)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return false, fmt.Errorf("zookeeper: grant set: listing %s: %w", kp, err)
		}
		v := judge(children, n.path[len(kp)+1:])
		if !v.present {
			return false, fmt.Errorf("zookeeper: lock node %s vanished right after its creation (session expired, or deleted by another client)", n.path)
		}
		granted = granted && v.granted
	}
	return granted, nil
}

// discardSet deletes the set's nodes: ns, or where ns is nil (not known)
// the nodes of the leases' owners. One multi deletes them all; if that
// fails (one is gone, a connection failed), each is discarded on its own.
func (d *zkDriver) discardSet(ls []*driver.Lease, ns []node) {
	if ns != nil {
		ops := make([]any, len(ns))
		for i, n := range ns {
			ops[i] = &zk.DeleteRequest{Path: n.path, Version: -1}
		}
		ctx, cancel := context.WithTimeout(context.Background(), discardWait)
		_, err := write(ctx, d, func() ([]zk.MultiResponse, error) { return d.conn.Multi(ops...) })
		cancel()
		if err == nil {
			return
		}
	}
	for i, l := range ls {
		path := ""
		if ns != nil {
			path = ns[i].path
		}
		d.discard(d.keyPath(l.Key), l.Owner, path)
	}
}
