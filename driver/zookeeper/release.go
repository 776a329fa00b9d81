package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Release deletes the lease's node: one round trip. For a grant whose
// outcome was unknown (no Data), it finds the node by the owner prefix
// (none exists while the connection never had a session).
// When the delete fails for a connection reason, the janitor keeps trying
// while the session may live.
func (d *zkDriver) Release(ctx context.Context, l *driver.Lease) error {
	g, _ := l.Data.(*grant)
	d.mon.remove(l)
	if g == nil {
		if d.start.neverUp() {
			// The attempt waited for the first session in vain: no
			// request was sent, so no node exists.
			return fmt.Errorf("zookeeper: no session yet: %w", driver.ErrNotHeld)
		}
		kp := d.keyPath(l.Key)
		n, err := d.deleteOwned(ctx, kp, l.Owner)
		if err != nil {
			d.mon.adopt(&orphan{keyPath: kp, owner: l.Owner})
			return err
		}
		if n == 0 {
			return driver.ErrNotHeld
		}
		return nil
	}
	if g.session != d.conn.SessionID() {
		return fmt.Errorf("zookeeper: session %#x of %s ended: %w", g.session, g.path, driver.ErrNotHeld)
	}
	err := deleteNode(ctx, d, g.path)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("zookeeper: %s is gone: %w", g.path, driver.ErrNotHeld)
	default:
		d.mon.adopt(&orphan{path: g.path, session: g.session})
		return err
	}
}

// Refresh checks that the lease's node still exists: one round trip (an
// exists, which a follower answers). The read proves nothing to the
// leader, which expires sessions; the monitor's heartbeats do. So the
// validity it reports, whatever the TTL, is what is left of the session
// timeout after the session's last proof (see validitySince), counted
// from the moment the call began: no more than the monitor, which ends
// the session's leases at that proof plus the timeout, can keep.
func (d *zkDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	begin := time.Now() // lock counts the validity from a moment before
	g, _ := l.Data.(*grant)
	if g == nil {
		return 0, driver.ErrNotHeld
	}
	if g.session != d.conn.SessionID() {
		d.mon.remove(l)
		return 0, fmt.Errorf("zookeeper: session %#x of %s ended: %w", g.session, g.path, driver.ErrNotHeld)
	}
	// A read is answered by the server the session is connected to, which
	// may not have applied a deletion that another server committed (and
	// a grant to another client after it): sync first, so the read sees
	// every write committed before the Refresh.
	if _, err := write(ctx, d, func() (string, error) { return d.conn.Sync("/") }); err != nil {
		return 0, err
	}
	ok, st, err := exists(ctx, d, g.path)
	if err != nil {
		return 0, err
	}
	if !ok || st.EphemeralOwner != g.session {
		d.mon.remove(l)
		return 0, fmt.Errorf("zookeeper: %s is gone: %w", g.path, driver.ErrNotHeld)
	}
	return d.provenValidity(begin, g.session)
}

// provenValidity is the validity of a refresh of session sid's grants
// that began at begin (see validitySince), or an error when the session
// has no proof that leaves it any: the monitor is about to end its
// leases.
func (d *zkDriver) provenValidity(begin time.Time, sid int64) (time.Duration, error) {
	timeout := d.sessionTimeout()
	v := d.mon.validitySince(begin, sid, timeout)
	if v <= 0 {
		return 0, fmt.Errorf("zookeeper: no proof that session %#x is alive for its timeout %v (connection lost?)", sid, timeout)
	}
	return v, nil
}

// maxMulti bounds the request size of one RefreshBatch multi, well below
// ZooKeeper's default jute.maxbuffer of 1 MiB.
const maxMulti = 256 << 10

// RefreshBatch checks many nodes in one multi of check operations per
// 256 KiB of paths: one round trip, and a request that the leader checks
// the session for, which proves earlier requests (see monitor.answered),
// not itself. A multi fails whole when one check fails; the leases of a
// failed multi are then refreshed one by one. The validity is Refresh's,
// counted from the start of the batch.
func (d *zkDriver) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	begin := time.Now()
	errs := make([]error, len(ls))
	sid := d.conn.SessionID()
	var (
		idx  []int
		ops  []any
		size int
	)
	flush := func() {
		if len(ops) == 0 {
			return
		}
		batch := ops
		_, err := write(ctx, d, func() ([]zk.MultiResponse, error) { return d.conn.Multi(batch...) })
		if err != nil && !ambiguous(err) && ctx.Err() == nil && !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrSessionExpired) {
			// One check failed (a node is gone): find out which.
			for _, i := range idx {
				_, errs[i] = d.Refresh(ctx, ls[i], ttl)
			}
		} else {
			for _, i := range idx {
				errs[i] = err
			}
		}
		idx, ops, size = nil, nil, 0
	}
	for i, l := range ls {
		g, _ := l.Data.(*grant)
		if g == nil || g.session != sid {
			errs[i] = driver.ErrNotHeld
			if g != nil {
				d.mon.remove(l)
			}
			continue
		}
		if size+len(g.path)+16 > maxMulti {
			flush()
		}
		idx = append(idx, i)
		ops = append(ops, &zk.CheckVersionRequest{Path: g.path, Version: -1})
		size += len(g.path) + 16
	}
	flush()
	v, err := d.provenValidity(begin, sid)
	if err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return v, errs
}

// noResume is why the driver cannot resume a lease.
const noResume = "a zookeeper lease is an ephemeral node of its client's session, which another session can neither keep alive nor take over"

// noReentry is why the driver keeps no holds for named owners.
const noReentry = "a zookeeper grant is an ephemeral node of one client session; a hold from another session could not end with that session, so a crashed holder's hold would keep the key for as long as the first session lives"
