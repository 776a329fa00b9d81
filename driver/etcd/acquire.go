package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxTries bounds the writes a step makes when it loses a race of its own
// (another grant moved the counter, an entry appeared since its read).
const maxTries = 10

// waitSeconds is the TTL of a waiter's lease: lock steps every waiter at
// least every driver.Heartbeat, and each step renews it, so a waiter's
// place outlives a few missed steps, and the place of a waiter that died,
// or whose Leave could not reach etcd, holds up those behind it for 3 s
// at most (as on Redis), whatever the TTL it asked for. The grant moves
// the entry to a lease of the grant's TTL, made by the granting call.
const waitSeconds = 3

// waitState is a queued wait: its entry and lease, and its watches.
type waitState struct {
	name     string
	wake     chan<- struct{}
	create   int64 // the entry's create revision; 0 before it is made
	lease    int64 // the entry's lease while it waits
	leaseSec int64
	watches  []int64
	left     bool
	failing  time.Time // since when its steps have failed; zero after one went through
	leaseExp time.Time // lease lasts until then at the least (zero: unknown)
	unsure   int64     // the lease of a fastStep write of unknown outcome, revoked by the next Check
}

// errPlaceLost: the waiter's entry is gone or not the one it made (its
// lease expired while it waited: a paused process, a partition).
var errPlaceLost = errors.New("etcd: the waiter's entry is gone")

func limitError(other, limit int) error {
	return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrInvalid, other, limit)
}

func holdsOf(l *driver.Lease) []string {
	if l.Reentry {
		return []string{l.Owner}
	}
	return nil
}

// Acquire makes one attempt: a read of the key's queue and counter, and,
// when the grant rule lets a new entry in, a lease and one transaction
// that writes the entry and the counter if nothing entered the queue and
// no grant was made since the read. A held key leaves nothing behind.
func (d *etcdDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	return unreachable(ctx, d.attempt(ctx, l, nil))
}

// Join implements driver.Queuer: Acquire's attempt, and when the key is
// held, an entry at the end of the queue (see enqueue).
func (d *etcdDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	return unreachable(ctx, d.attempt(ctx, l, wake))
}

// noGrant marks, in driver.Lease.Data, an attempt known to have granted
// nothing (nothing was sent, or the server refused the grant and its
// lease is revoked), so that the clean-up lock makes after an error
// needs no round trip (Release answers ErrNotHeld at once).
type noGrant struct{}

// refused reports whether err is the server's refusal of a request, which
// was then not applied: no right (PermissionDenied), a failed or missing
// authentication, a request it will not take. lock counts other errors
// as unknown outcomes and releases by owner in the background; a refusal
// would refuse that release too, again and again until Close's bound.
func refused(err error) bool {
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.FailedPrecondition:
		return true
	}
	return false
}

func (d *etcdDriver) attempt(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	c, err := d.client()
	if err != nil {
		l.Data = noGrant{} // nothing was sent
		return err
	}
	n, name, sec := d.names(l.Key), d.reserve(l), seconds(l.TTL)
	var lease taken
	clean := true // no write on lease has been sent: it can be a spare again
	giveUp := func(err error) error {
		if lease.id != 0 && clean {
			d.putBack(l.Owner, lease)
		} else if rerr := revoke(ctx, c, lease.id); rerr != nil {
			return rerr // unknown: lock's clean-up (Release) revokes it
		}
		d.settled(l.Owner)
		return err
	}
	end := func(err error) error { // the attempt ends with no grant
		gave := giveUp(err)
		if gave == err {
			d.unreserve(l.Owner) // nothing of it is left: its slot is free
		}
		return gave
	}
	if wake != nil && l.Mode == driver.Exclusive && !l.Reentry && d.queued(l.Key) {
		// a waiter of this Locker found the key queued within busyFor:
		// a fast grant would most likely fail and read the queue,
		// which place reads anyway (and grants from, if it is empty)
		return d.enqueue(ctx, c, n, l, name, wake)
	}
	done, st, err := d.fastGrant(ctx, c, n, l, name)
	switch {
	case done:
		return nil
	case err != nil && refused(err):
		return d.refusal(l, end(err), err)
	case err != nil:
		return err // unknown: lock's clean-up (Release) revokes the spare
	}
	for try := 1; ; try, st = try+1, nil {
		if st == nil {
			if st, err = d.read(ctx, c, n, 0); err != nil {
				if refused(err) {
					return d.refusal(l, end(err), err)
				}
				return d.later(ctx, l, wake, err)
			}
		}
		if !l.Reentry && st.find(name) >= 0 {
			// the slot's name is in use, not by this attempt (which has
			// written nothing that landed): another slot
			name = d.burn(l.Key, l.Owner)
		}
		if l.Mode == driver.Permit {
			if o := otherLimit(st.entries, l.Limit, name); o != 0 {
				return end(limitError(o, l.Limit))
			}
		}
		if l.Reentry {
			if i := st.find(name); i == 0 {
				err := d.reenter(ctx, c, n, l, st.entries[0])
				if errors.Is(err, errChanged) {
					if try <= maxTries {
						continue // read the entry again
					}
					err = &driver.HeldError{}
				}
				return err
			} else if i > 0 {
				return end(&driver.HeldError{})
			}
		}
		if !turn(st.entries, l.Mode, l.Limit) || try > maxTries {
			if wake == nil {
				return end(&driver.HeldError{})
			}
			if err := giveUp(nil); err != nil {
				return d.later(ctx, l, wake, err)
			}
			return d.enqueue(ctx, c, n, l, name, wake)
		}
		if lease.id == 0 {
			if lease, err = d.takeLease(ctx, c, l.Owner, sec); err != nil {
				return d.later(ctx, l, wake, err)
			}
		}
		clean = false
		ok, rev, tok, err := d.grantWrite(ctx, c, n, name, st, l, lease.id, holdsOf(l),
			clientv3.Compare(clientv3.ModRevision(n.queue).WithPrefix(), "<", st.rev+1),
			clientv3.Compare(clientv3.CreateRevision(n.queue+name), "=", 0))
		if err != nil {
			if refused(err) {
				return d.refusal(l, end(err), err)
			}
			if isLeaseNotFound(err) && try <= maxTries {
				// this lease, or the counter's, was revoked before the
				// write took it: new ones
				revoke(ctx, c, lease.id)
				lease = taken{}
				continue
			}
			return err
		}
		if ok {
			d.granted(l, n, grantRef{name: name, create: rev}, tok, rev, lease) // the entry was made at rev
			return nil
		}
	}
}

// refusal ends an attempt that the server refused (err) once giveUp
// revoked its lease (gave is giveUp's answer: err, or the revoke's error,
// which leaves the outcome to lock's clean-up).
func (d *etcdDriver) refusal(l *driver.Lease, gave, err error) error {
	if gave == err {
		l.Data = noGrant{}
		d.unreserve(l.Owner)
	}
	return gave
}

// errChanged is reenter's answer when the entry changed between the read
// and the write (its lease was lengthened, by this call or by another
// Lease of the grant, or another hold came or went): the caller reads it
// again.
var errChanged = errors.New("etcd: the grant's entry changed since it was read")

// reenter adds l's hold to its named owner's grant e, first in the queue:
// its lease is renewed (lengthened to l's TTL if shorter), then the hold
// is written if the entry did not change since the read (errChanged if
// it did).
func (d *etcdDriver) reenter(ctx context.Context, c *conn, n names, l *driver.Lease, e entry) error {
	if !e.dlockNamed {
		return &driver.HeldError{}
	}
	key := n.queue + e.name
	if err := d.extend(ctx, c, key, e, seconds(l.TTL)); err != nil {
		if errors.Is(err, driver.ErrNotHeld) {
			return &driver.HeldError{}
		}
		return err
	}
	v := e.v
	v.holds = append(append([]string(nil), v.holds...), l.Owner)
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", e.mod)).
		Then(clientv3.OpPut(key, v.String(), clientv3.WithIgnoreLease())).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errChanged
	}
	d.granted(l, n, grantRef{name: e.name, create: e.create}, v.token, resp.Header.Revision, taken{id: e.lease}) // renewed by this call (extend)
	return nil
}

// later is a Join's answer to a backend failure before its entry was
// made (a member died under the request): a wait whose first Check makes
// the entry, so that the waiter rides the failure out. Without wake (an
// Acquire) or once ctx ended, the failure is returned.
func (d *etcdDriver) later(ctx context.Context, l *driver.Lease, wake chan<- struct{}, err error) error {
	if wake == nil || ctx.Err() != nil {
		return err
	}
	name := d.reserve(l)
	d.mu.Lock()
	ws := d.waits[l.Owner]
	if ws == nil {
		ws = &waitState{name: name, wake: wake}
		d.waits[l.Owner] = ws
	}
	d.mu.Unlock()
	return d.ride(ctx, ws, err)
}

// enqueue puts l's entry, named name, at the end of the queue, attached
// to a lease of its own, and takes the first step of its wait.
func (d *etcdDriver) enqueue(ctx context.Context, c *conn, n names, l *driver.Lease, name string, wake chan<- struct{}) error {
	ws := &waitState{name: name, wake: wake}
	d.mu.Lock()
	if old := d.waits[l.Owner]; old != nil {
		ws = old
	}
	d.waits[l.Owner] = ws
	d.mu.Unlock()
	return d.place(ctx, c, n, l, ws)
}

// place makes ws's entry (a lease, then one transaction that writes the
// entry and reads the queue and counter) and steps.
func (d *etcdDriver) place(ctx context.Context, c *conn, n names, l *driver.Lease, ws *waitState) error {
	sec := int64(waitSeconds)
	t, err := d.takeLease(ctx, c, l.Owner, sec)
	if err != nil {
		return d.ride(ctx, ws, err) // the next Check places it
	}
	lease := t.id
	d.mu.Lock()
	left := ws.left
	d.mu.Unlock()
	if left {
		return errors.Join(errors.New("etcd: the wait was left"), revoke(ctx, c, lease))
	}
	key := n.queue + ws.name
	v := entryValue{mode: l.Mode, limit: l.Limit, since: d.wall().UnixMicro(), owner: l.Owner, note: l.Note}
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(
		clientv3.OpPut(key, v.String(), clientv3.WithLease(clientv3.LeaseID(lease))),
		clientv3.OpGet(n.queue, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(n.counter),
	).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return d.ride(ctx, ws, err) // the next Check places it, or adopts it if it landed
	}
	if !resp.Succeeded {
		return d.adopt(ctx, c, n, l, ws, lease, resp.Responses[0].GetResponseRange().Kvs)
	}
	d.mu.Lock()
	ws.create, ws.lease, ws.leaseSec, ws.leaseExp, ws.failing = resp.Header.Revision, lease, sec, t.expires, time.Time{}
	d.mu.Unlock()
	st := parseState(n, resp.Header.Revision, resp.Responses[1].GetResponseRange().Kvs, resp.Responses[2].GetResponseRange().Kvs)
	return d.step(ctx, c, n, l, ws, st)
}

// adopt takes over the waiting entry that an earlier place of ws made
// while its reply was lost (on a lease this attempt made, with its
// owner), renewing its lease in this call, and steps; unused, the lease
// just made, goes. An entry that is not the attempt's holds the name:
// the next Check places the wait under another.
func (d *etcdDriver) adopt(ctx context.Context, c *conn, n names, l *driver.Lease, ws *waitState, unused int64, kvs []*mvccpb.KeyValue) error {
	key := n.queue + ws.name
	revoke(ctx, c, unused)
	var e entry
	if len(kvs) == 1 {
		e = parseEntry(n, kvs[0])
	}
	if !e.dlockAnon || e.owner() != l.Owner || e.v.token != 0 || !d.made(l.Owner, e.lease) {
		name := d.burn(l.Key, l.Owner)
		d.mu.Lock()
		ws.name = name
		d.mu.Unlock()
		return d.ride(ctx, ws, fmt.Errorf("etcd: the waiter's key %q exists already", key))
	}
	ttls, err := keepAlive(ctx, c, []int64{e.lease})
	if err != nil {
		return d.ride(ctx, ws, err)
	}
	if ttls[e.lease] <= 0 {
		return d.ride(ctx, ws, errPlaceLost) // gone with its lease: the next Check places it again
	}
	d.mu.Lock()
	ws.create, ws.lease, ws.leaseSec, ws.leaseExp, ws.failing = e.create, e.lease, ttls[e.lease], time.Time{}, time.Time{}
	d.mu.Unlock()
	st, err := d.read(ctx, c, n, ws.create)
	if err != nil {
		return d.ride(ctx, ws, err)
	}
	return d.step(ctx, c, n, l, ws, st)
}

// made reports whether this attempt of owner made lease (see grantLease).
func (d *etcdDriver) made(owner string, lease int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.pending[owner], lease)
}

// Check implements driver.Queuer. It renews the waiter's lease first: a
// lease that expired while the waiter was blocked (a paused process, a
// partition) ends its place, and it never takes the key on it (the
// check that etcd's concurrency.Mutex lacked, etcd-io/etcd#11456): it
// queues again at the end, with a new lease. Then it reads the queue and
// takes the key if the rule grants its entry, which must be the one it
// made, on the lease it made it with.
func (d *etcdDriver) Check(ctx context.Context, l *driver.Lease) error {
	return unreachable(ctx, d.check(ctx, l))
}

func (d *etcdDriver) check(ctx context.Context, l *driver.Lease) error {
	c, err := d.client()
	if err != nil {
		return err
	}
	d.mu.Lock()
	ws := d.waits[l.Owner]
	d.mu.Unlock()
	if ws == nil {
		return fmt.Errorf("etcd: Check of a lease that did not Join")
	}
	n := d.names(l.Key)
	if ws.create == 0 {
		return d.place(ctx, c, n, l, ws)
	}
	if ws.unsure != 0 {
		// a fastStep's write whose reply was lost: revoked, it cannot
		// land later, and if it landed, its entry went with it (the
		// place is lost: the step queues again)
		if err := revoke(ctx, c, ws.unsure); err != nil {
			return d.ride(ctx, ws, err)
		}
		ws.unsure = 0
	}
	var st *state
	if fastStepFits(l, ws) {
		var done bool
		if done, st, err = d.fastStep(ctx, c, n, l, ws); done || err != nil {
			return err
		}
	}
	sent := time.Now()
	ttls, err := keepAlive(ctx, c, []int64{ws.lease})
	if err != nil {
		return d.ride(ctx, ws, err)
	}
	d.through(ws)
	if ttls[ws.lease] <= 0 {
		return d.requeue(ctx, c, n, l, ws)
	}
	d.mu.Lock()
	ws.leaseExp = sent.Add(time.Duration(ttls[ws.lease]) * time.Second)
	d.mu.Unlock()
	if st == nil {
		if st, err = d.read(ctx, c, n, ws.create); err != nil {
			return d.ride(ctx, ws, err)
		}
	}
	err = d.step(ctx, c, n, l, ws, st)
	if errors.Is(err, errPlaceLost) {
		return d.requeue(ctx, c, n, l, ws)
	}
	return err
}

// rideOut is how long a waiter rides out backend failures (a member
// died, an election, the network cut, a quorum lost while a member
// restarts). It is longer than etcd's own request timeout (5 s plus two
// election timeouts, 7 s by default), after which a member answers a
// request it could not commit with "request timed out": one such request
// must not end the wait. Then the failure ends the wait, so that a Lock
// with no deadline fails when etcd cannot be reached. (The waiter's place
// lives waitSeconds without a renewal: after a longer failure it queues
// again.)
const rideOut = 15 * time.Second

// ride is a step's answer to a backend failure: a HeldError, so lock
// checks again, until the failures have lasted rideOut; the failure
// itself once ctx ended or then, or at once when the server refused the
// user (see userRefused).
func (d *etcdDriver) ride(ctx context.Context, ws *waitState, err error) error {
	if ctx.Err() != nil {
		return errors.Join(err, ctx.Err())
	}
	if userRefused(err) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ws.failing.IsZero() {
		ws.failing = time.Now()
	}
	if time.Since(ws.failing) > rideOut {
		return err
	}
	return &driver.HeldError{RetryAfter: 100 * time.Millisecond}
}

// userRefused reports whether the server refused the Locker's user: its
// log-in failed (a wrong password, a deleted user), it has no right to
// the keys, or the Locker refused the member's certificate (certRefused).
// Waiting does not mend any; a wait that rode them out would step, and
// log in, every 100 ms until its context ended.
func userRefused(err error) bool {
	if certRefused(err) {
		return true
	}
	switch rpctypes.Error(err) {
	case rpctypes.ErrAuthFailed, rpctypes.ErrPermissionDenied:
		return true
	}
	return false
}

// through notes that a step of ws reached the server.
func (d *etcdDriver) through(ws *waitState) {
	d.mu.Lock()
	ws.failing = time.Time{}
	d.mu.Unlock()
}

// requeue gives up ws's lost place and queues again at the end.
func (d *etcdDriver) requeue(ctx context.Context, c *conn, n names, l *driver.Lease, ws *waitState) error {
	d.unwatch(ws)
	if err := revoke(ctx, c, ws.lease); err != nil {
		return d.ride(ctx, ws, err)
	}
	d.mu.Lock()
	ws.create, ws.lease = 0, 0
	d.mu.Unlock()
	return d.place(ctx, c, n, l, ws)
}

// step decides from st whether ws's entry is granted, and either writes
// the grant (its token, and the counter, if the entry is still the one it
// made, on its lease, and no grant came since the read), or watches the
// entries whose departure may be its turn, from the revision after st
// (rewatch).
// The grant's lease is ws's (its validity what is left of it: place
// may have taken a spare), or, when its TTL is not the grant's, one
// taken by this call: a lease's expiry must count from within the call
// whose start lock counts the validity from.
func (d *etcdDriver) step(ctx context.Context, c *conn, n names, l *driver.Lease, ws *waitState, st *state) error {
	key := n.queue + ws.name
	var fresh taken // a lease of the grant's TTL, a spare or made by this call
	defer func() {
		if fresh.id != 0 {
			revoke(ctx, c, fresh.id) // not granted; else Leave revokes it (pending)
		}
	}()
	for try := 1; ; try++ {
		i := st.find(ws.name)
		if i < 0 || st.entries[i].create != ws.create || st.entries[i].lease != ws.lease {
			return errPlaceLost
		}
		if l.Mode == driver.Permit {
			if o := otherLimit(st.entries, l.Limit, ws.name); o != 0 {
				return limitError(o, l.Limit)
			}
		}
		ahead := before(st.entries, ws.create)
		if !turn(ahead, l.Mode, l.Limit) {
			d.markQueued(l.Key)
			d.rewatch(n, ws, ahead, l, st.rev+1)
			return &driver.HeldError{}
		}
		// the waiting lease: renewed by this call (Check's keep-alive,
		// adopt's), or taken by place, maybe a spare made before the
		// call: a grant on it reports what is left of it (ws.leaseExp,
		// known from below; zero after adopt)
		lease := taken{id: ws.lease}
		if !ws.leaseExp.IsZero() {
			lease.sec, lease.expires, lease.spare = ws.leaseSec, ws.leaseExp, true
		}
		if sec := seconds(l.TTL); ws.leaseSec != sec {
			if fresh.id == 0 {
				t, err := d.takeLease(ctx, c, l.Owner, sec)
				if err != nil {
					return err
				}
				fresh = t
			}
			lease = fresh
		}
		ok, rev, tok, err := d.grantWrite(ctx, c, n, ws.name, st, l, lease.id, nil,
			clientv3.Compare(clientv3.CreateRevision(key), "=", ws.create),
			clientv3.Compare(clientv3.LeaseValue(key), "=", ws.lease))
		switch {
		case err != nil && isLeaseNotFound(err):
			// this lease, the counter's, or the waiting one (and the
			// entry with it) went: read again, with a new fresh one
			if lease.id == fresh.id {
				revoke(ctx, c, fresh.id)
				fresh = taken{}
			}
		case err != nil:
			fresh = taken{} // the write may have landed: Leave revokes it
			return err
		}
		if ok {
			fresh = taken{}
			d.endWait(l.Owner, ws)
			d.granted(l, n, grantRef{name: ws.name, create: ws.create}, tok, rev, lease)
			return nil
		}
		if try == maxTries {
			return &driver.HeldError{}
		}
		if st, err = d.read(ctx, c, n, ws.create); err != nil {
			return d.ride(ctx, ws, err)
		}
	}
}

// busyFor is how long after one of its waiters found a key queued
// behind another entry a Locker's next Join of the key skips the fast
// grant and places its entry at once: on a hot key the fast grant fails
// and reads the queue, one request more per grant than the place, which
// reads it too. Once the queue empties, a grant through the place costs
// a request more than a fast one, for busyFor at most.
const busyFor = time.Second

// maxQueuedKeys bounds the keys whose last queued wait is remembered.
const maxQueuedKeys = 1024

// markQueued notes that a waiter found key queued behind another entry.
func (d *etcdDriver) markQueued(key string) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.busy[key]; !ok && len(d.busy) >= maxQueuedKeys {
		for k, t := range d.busy {
			if now.Sub(t) > busyFor {
				delete(d.busy, k)
			}
		}
		if len(d.busy) >= maxQueuedKeys {
			return
		}
	}
	d.busy[key] = now
}

// queued reports whether a waiter found key queued within busyFor.
func (d *etcdDriver) queued(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.busy[key]
	if ok && time.Since(t) > busyFor {
		delete(d.busy, key)
		return false
	}
	return ok
}

// before returns the entries of es (in create revision order) created
// before revision rev.
func before(es []entry, rev int64) []entry {
	i := 0
	for i < len(es) && es[i].create < rev {
		i++
	}
	return es[:i]
}

// rewatch replaces ws's watches with watches on the entries whose
// departure may be its turn, read at revision from-1: each entry's from
// etcd's revision when it is made, checked by stillThere; the whole
// queue's (over maxPermitWatches entries) from revision from.
func (d *etcdDriver) rewatch(n names, ws *waitState, ahead []entry, l *driver.Lease, from int64) {
	d.unwatch(ws)
	wake := ws.wake
	fn := func(bool) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	blocking, all := blockers(ahead, l.Mode, l.Limit)
	var ids []int64
	if all {
		ids = append(ids, d.w.add(n.queue, clientv3.GetPrefixRangeEnd(n.queue), from, fn))
	}
	for _, b := range blocking {
		ids = append(ids, d.w.addNow(n.queue+b, fn, d.stillThere(n.queue+b, createOf(ahead, b), from, fn)))
	}
	d.mu.Lock()
	ws.watches = ids
	d.mu.Unlock()
}

// stillThere is a waiter's check of a watch on key made from etcd's
// revision at its creation (watcher.addNow), where its read, at
// revision from-1, found key created at revision create: when the
// watch starts after from, a deletion in between would not be sent, so
// it reads key once more, and wakes the waiter (fn) unless key is there
// with the same create revision: etcd's own word that it was not
// deleted since the read (a name put again is created anew). A wake is
// only a wake: the waiter's step reads, or compares, all it acts on.
func (d *etcdDriver) stillThere(key string, create, from int64, fn func(bool)) func(context.Context, int64) {
	return func(ctx context.Context, rev int64) {
		if rev < from {
			return // the watch covers every revision after the read
		}
		d.cmu.Lock()
		c := d.conn
		d.cmu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, stillThereTimeout)
		defer cancel()
		kvs, _, err := c.get(ctx, key)
		if err != nil || len(kvs) == 0 || kvs[0].CreateRevision != create {
			fn(false)
		}
	}
}

// stillThereTimeout bounds stillThere's read; a read that fails wakes
// the waiter, whose step then reads.
const stillThereTimeout = 5 * time.Second

// createOf is the create revision of the entry named name in es.
func createOf(es []entry, name string) int64 {
	for _, e := range es {
		if e.name == name {
			return e.create
		}
	}
	return 0
}

func (d *etcdDriver) unwatch(ws *waitState) {
	d.mu.Lock()
	ids := ws.watches
	ws.watches = nil
	d.mu.Unlock()
	for _, id := range ids {
		d.w.remove(id)
	}
}

// endWait forgets ws after its grant.
func (d *etcdDriver) endWait(owner string, ws *waitState) {
	d.unwatch(ws)
	d.mu.Lock()
	if d.waits[owner] == ws {
		delete(d.waits, owner)
	}
	d.mu.Unlock()
}

// Leave implements driver.Queuer: it deletes l's entry, granted or not
// (the generation its wait made, or, not knowing it, the entry that
// names l's owner), and revokes every lease the attempt made, so that a
// step of l's still on its way (its reply lost, its context ended) fails
// when it lands.
func (d *etcdDriver) Leave(ctx context.Context, l *driver.Lease) error {
	c, err := d.client()
	if err != nil {
		return err
	}
	name, create, known := d.entryOf(l)
	d.mu.Lock()
	ws := d.waits[l.Owner]
	var leases []int64
	if ws != nil {
		ws.left = true
		leases = append(leases, ws.lease)
		name, create, known = ws.name, ws.create, true
	}
	leases = append(leases, d.pending[l.Owner]...)
	d.mu.Unlock()
	if ws != nil {
		d.unwatch(ws)
	}
	d.dropHolder(l.Owner)
	if known {
		prev, err := deleteOwn(ctx, c, d.names(l.Key).queue+name, l.Owner, create)
		if err != nil {
			return err
		}
		for _, kv := range prev {
			leases = append(leases, kv.Lease)
		}
	}
	if err := revoke(ctx, c, leases...); err != nil {
		return err
	}
	d.mu.Lock()
	if d.waits[l.Owner] == ws {
		delete(d.waits, l.Owner)
	}
	delete(d.pending, l.Owner)
	d.mu.Unlock()
	d.unreserve(l.Owner)
	return nil
}
