package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// node is a lock node this driver created: its path and, once known, its
// czxid and the session that owns it.
type node struct {
	path           string
	czxid, session int64
	// listing, when set, is the listing of the queue sent right behind the
	// create (see join); inspect uses it once.
	listing *future[[]string]
	// alone: the create's reply showed the node as the key node's only
	// child, so nothing blocks it.
	alone bool
}

// join creates l's node in the queue of the key node kp: an ephemeral
// sequential node with the protected prefix, creating kp (and missing
// parents) as container nodes when needed. When the create's reply is
// lost, it finds the node again by its owner prefix once the connection is
// back. With persist (a waiter), connection failures are waited out until
// ctx ends; otherwise join gives up after a few attempts. It makes its
// requests in the calling goroutine (see first and step) and consults ctx
// only between attempts.
func (d *zkDriver) join(ctx context.Context, l *driver.Lease, kp string, persist bool) (node, error) {
	bg := context.WithoutCancel(ctx)
	prefix := kp + "/" + nodePrefix(l.Owner, l.Mode, l.Limit)
	var err error
	for attempt := 0; attempt < 5 || persist; attempt++ {
		if attempt > 0 && err != nil && !errors.Is(err, zk.ErrNoNode) && !d.pause(ctx) {
			return node{}, ctx.Err()
		}
		var (
			n       node
			listing *future[[]string]
		)
		if persist {
			// A waiter sends the create by itself: the multi's reply tells
			// whether the node is the key node's only child (see create),
			// granted then without a listing; a waiter behind others lists
			// the queue next (see step), without a goroutine for the
			// create, whose reply it waits for anyway.
			n, err = run(d, true, func() (node, error) { return d.create(prefix, kp, l.Note) })
		} else {
			// Send the create and, right behind it, a listing of the queue:
			// ZooKeeper answers a session's requests in the order sent, so
			// the listing sees the new node, and the two cost one round
			// trip. The create (in its own goroutine) is queued first unless
			// the scheduler interleaves the goroutines otherwise; inspect
			// then lists again.
			c := start(d, true, func() (node, error) { return d.create(prefix, kp, l.Note) })
			runtime.Gosched()
			listing = &future[[]string]{done: make(chan struct{})}
			listing.v, _, listing.err = d.conn.Children(kp)
			close(listing.done)
			<-c.done
			n, err = c.v, c.err
		}
		switch {
		case err == nil:
			n.listing = listing
			return n, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := d.makeParents(bg, kp); err != nil && !(persist && transient(err)) {
				return node{}, err
			}
		case errors.Is(err, zk.ErrSessionExpired):
			// Not applied, or applied and deleted with the session: try
			// again in the new session.
		case ambiguous(err):
			// The reply was lost: look for the node by its owner prefix.
			for {
				path, ferr := d.findOwn(bg, kp, l.Owner)
				if ferr == nil && path != "" {
					return node{path: path}, nil
				}
				if ferr == nil {
					break // not created: try again
				}
				if !persist || !transient(ferr) || !d.pause(ctx) {
					d.discard(kp, l.Owner, "")
					return node{}, errors.Join(ferr, ctx.Err())
				}
			}
		case persist && transient(err):
			// Not sent (ErrNoServer) or refused: try again.
		default:
			return node{}, err
		}
	}
	return node{}, fmt.Errorf("zookeeper: creating a node under %s: %w", kp, err)
}

// create makes one attempt at creating the node: a multi of the create and
// a setData of the key node kp (no data, any version). A multi is one
// transaction with one zxid, so kp's new mzxid is the node's czxid: the
// token comes with the create's reply, without reading the node back (a
// read pipelined with the listing costs more). Where the identity may
// create children of kp but not write it (a key node made by another
// client), it falls back to a plain create, and inspect reads the czxid.
//
// The node's data is the grant's note (driver.Lease.Note, as its UTF-8
// bytes; none when it has no note), written by the create itself, so it
// lives exactly as long as the grant; Inspect reads it back. zk.Lock and
// Curator never read a lock node's data (Curator writes its own, the
// client's address, into its nodes), so mixed fleets are unaffected.
func (d *zkDriver) create(prefix, kp, note string) (node, error) {
	var data []byte
	if note != "" {
		data = []byte(note)
	}
	flags := int32(zk.FlagEphemeral | zk.FlagSequence)
	sid := d.conn.SessionID()
	if !d.plainCreate.Load() {
		res, err := d.conn.Multi(
			&zk.CreateRequest{Path: prefix, Data: data, Acl: d.acl, Flags: flags},
			&zk.SetDataRequest{Path: kp, Version: -1})
		if errors.Is(err, zk.ErrNoAuth) && len(res) == 2 && res[0].Error == nil {
			d.plainCreate.Store(true) // the create would do; the setData may not
		} else {
			if err != nil {
				return node{}, err
			}
			n := node{path: res[0].String}
			if st := res[1].Stat; st != nil && d.conn.SessionID() == sid {
				n.czxid, n.session = st.Mzxid, sid
				n.alone = st.NumChildren == 1
			}
			return n, nil
		}
	}
	path, err := d.conn.Create(prefix, data, flags, d.acl)
	return node{path: path}, err
}

// findOwn returns the path of owner's node under kp, or "" if there is
// none.
func (d *zkDriver) findOwn(ctx context.Context, kp, owner string) (string, error) {
	children, err := d.childrenSynced(ctx, kp)
	if err != nil {
		return "", err
	}
	for _, name := range children {
		if strings.HasPrefix(name, ownPrefix(owner)) {
			return kp + "/" + name, nil
		}
	}
	return "", nil
}

// makeParents creates the key node kp and its missing ancestors as
// container nodes, which the server deletes once they have had children
// and have none left.
func (d *zkDriver) makeParents(ctx context.Context, kp string) error {
	err := d.mkContainer(ctx, kp, d.acl)
	if errors.Is(err, zk.ErrNoNode) {
		for i := 1; i < len(kp); i++ {
			if kp[i] != '/' {
				continue
			}
			if err := d.mkContainer(ctx, kp[:i], d.rootACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
		err = d.mkContainer(ctx, kp, d.acl)
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("zookeeper: creating %s: %w", kp, err)
	}
	return nil
}

func (d *zkDriver) mkContainer(ctx context.Context, path string, acl []zk.ACL) error {
	_, err := write(ctx, d, func() (string, error) {
		return d.conn.CreateContainer(path, nil, zk.FlagContainer, acl)
	})
	return err
}
