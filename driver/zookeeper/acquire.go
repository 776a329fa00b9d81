package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// Acquire is TryLock and TryRLock: create the node (learning its czxid
// from the same reply: see create) and list the queue, in one round trip
// (see join); when something earlier blocks the node, delete it and report
// the key held. Round trips: 1 when granted, 2 when held.
func (d *zkDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	n, v, err := d.first(ctx, l, d.keyPath(l.Key))
	if err != nil {
		return err
	}
	if !v.granted {
		return &driver.HeldError{}
	}
	d.grant(l, n, d.sessionTimeout())
	if v.announce {
		d.announce(n)
	}
	return nil
}

// Lock, RLock and Acquire are the steps of driver.Queuer, which lock
// drives: Join creates the node and lists the queue; if something earlier
// blocks the node, it watches the nearest blocker (getData with a watch,
// as zk.Lock and Curator do), or, for a permit first in line behind
// granted permits, the key node's children (see judge). The watch's firing wakes lock, whose Check lists the
// queue again; a Check before it fires costs nothing. A lost connection
// is waited out, keeping the node (its session survives a reconnection
// within the session timeout; if it does not, the node is gone and the
// waiter queues again). Leave deletes the node. Round trips: 1 when the
// key is free (the create's reply shows the node alone); else 1 to list
// the queue, 1 to set the watch, and after the release the server's
// notification and 1 more listing.

// waiter is l.Data while l waits, from Join to the grant or Leave.
type waiter struct {
	kp   string
	n    node // the node in the queue; no path when not queued
	wake chan<- struct{}
	// fired is closed when the watch set on the blocker fires; nil when no
	// watch is set (none was needed, or a step failed), so that the next
	// Check lists the queue.
	fired chan struct{}
	stop  chan struct{} // closed by end: the watch's goroutine stops
	ended sync.Once
	// onChildren: the watch set was on the key node's children (a permit
	// first in line), so the next step lists them with a new watch at
	// once.
	onChildren bool
}

// Join implements driver.Queuer.
func (d *zkDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	w := &waiter{kp: d.keyPath(l.Key), wake: wake, stop: make(chan struct{})}
	l.Data = w
	d.mon.waiting(1) // the monitor proves the session while l waits
	return d.step(ctx, l, w)
}

// Check implements driver.Queuer. While the watch has not fired, the
// blocker is still there (or the connection is down, which the watch
// outlives): nothing to ask the server.
func (d *zkDriver) Check(ctx context.Context, l *driver.Lease) error {
	w, ok := l.Data.(*waiter)
	if !ok {
		return fmt.Errorf("zookeeper: Check of %s without Join", l.Key)
	}
	if w.fired != nil {
		select {
		case <-w.fired:
			w.fired = nil
		default:
			return &driver.HeldError{}
		}
	}
	return d.step(ctx, l, w)
}

// Leave implements driver.Queuer. It may run more than once (lock retries
// one whose context ended, possibly while the first still runs): the
// deletion is harmless to repeat, and end runs once.
func (d *zkDriver) Leave(ctx context.Context, l *driver.Lease) error {
	w, ok := l.Data.(*waiter)
	if !ok {
		return nil // no wait to end
	}
	d.end(w)
	if w.n.path != "" {
		d.discard(w.kp, l.Owner, w.n.path)
	}
	return nil
}

// end ends w's wait: its watch's goroutine stops, and the monitor counts
// one waiter less.
func (d *zkDriver) end(w *waiter) {
	w.ended.Do(func() {
		close(w.stop)
		d.mon.waiting(-1)
	})
}

// step is Join's and Check's work: join the queue if l is not in it, list
// the queue, and take the key or watch the nearest blocker. Its requests
// run to the end (a deletion by Leave follows a step cut short), with
// go-zookeeper's blocking calls in a row, so a hand-off (the watch fires,
// Check lists the queue and finds l first) starts no goroutine here: on a
// loaded machine, a contended key's throughput is the hand-offs' latency.
// A connection or session failure leaves the node in place and is
// reported as a wait, with the next Check, which lists the queue again,
// due soon.
func (d *zkDriver) step(ctx context.Context, l *driver.Lease, w *waiter) error {
	begin := time.Now() // lock counts the validity from a moment before
	bg := context.WithoutCancel(ctx)
	ride := func(err error) error {
		if transient(err) {
			return &driver.HeldError{RetryAfter: pollEvery(d.sessionTimeout())}
		}
		return err
	}
	var (
		v     verdict
		known bool // v judges a listing made since the last turn of the loop
		// seen is a permit waiter before l found granted (its data
		// written) while the listing said it waits: then l watches the
		// children, which cannot miss its turn, rather than list again
		// and again.
		seen string
	)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.n.path == "" {
			n, err := d.join(ctx, l, w.kp, true)
			if err != nil {
				return err
			}
			w.n = n
			if n.alone && n.listing == nil {
				// The only child: granted, as a listing would show.
				v, known = verdict{present: true, granted: true}, true
			}
		}
		if !known && w.onChildren && w.n.czxid != 0 && w.n.session != 0 {
			// The children changed: list them with a new watch (the case
			// below), which judges the node anew.
			v, known = verdict{present: true, children: true}, true
		}
		if !known {
			var err error
			if v, err = d.inspect(bg, w.kp, &w.n); err != nil {
				return ride(err)
			}
		}
		known, w.onChildren = false, false
		switch {
		case !v.present:
			// The node is gone: its session expired, or another client
			// deleted it. Queue again, at the back.
			w.n = node{}
			continue
		case v.conflict != 0:
			d.discard(w.kp, l.Owner, w.n.path)
			w.n = node{}
			return limitError(l, v)
		case v.granted:
			if err := d.ensureProof(ctx, w.n.session); err != nil {
				return ride(err)
			}
			// The session was proven alive at most a third of its
			// timeout ago, maybe before the step began: the grant lasts
			// as long as the session may, counted from that proof.
			d.grant(l, w.n, d.mon.validitySince(begin, w.n.session, d.sessionTimeout()))
			d.end(w)
			if v.announce {
				d.announce(w.n)
			}
			return nil
		case v.children || v.watch != "" && v.watch == seen:
			// The watch is set by the listing judged, so no change after
			// it is missed.
			children, ch, err := d.watchChildren(bg, w.kp)
			if err != nil {
				return ride(err)
			}
			v, known = judge(children, w.n.path[len(w.kp)+1:]), true
			if v.present && !v.granted && v.conflict == 0 && (v.children || v.watch == seen) {
				w.arm(ch, d.mon.stop)
				w.onChildren = true
				return &driver.HeldError{}
			}
			continue // judged anew: act on it
		}
		ch, st, err := d.watch(bg, w.kp+"/"+v.watch)
		if err != nil {
			return ride(err)
		}
		if ch == nil {
			continue // the blocker is gone already: list again
		}
		if v.watchGrant && st.Version != 0 {
			// The permit waiter before l was granted after the listing
			// (see announce): l's turn may have come. List again.
			seen = v.watch
			continue
		}
		w.arm(ch, d.mon.stop)
		return &driver.HeldError{}
	}
}

// arm makes the next Check wait for the watch ch.
func (w *waiter) arm(ch <-chan zk.Event, closed chan struct{}) {
	w.fired = make(chan struct{})
	go w.await(ch, w.fired, closed)
}

// await waits for the watch's event (the blocker deleted or changed, or
// the watch ended with the session or the connection: the next listing
// tells) and wakes lock. go-zookeeper cannot remove a watch, but its
// channel is buffered: when the wait ends first (or the driver closes),
// the goroutine just stops.
func (w *waiter) await(ch <-chan zk.Event, fired, closed chan struct{}) {
	select {
	case <-ch:
		close(fired)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	case <-w.stop:
	case <-closed:
	}
}

// first makes TryLock's moves: join the queue, list it, and leave again
// when the key is held. It makes them in one goroutine, with go-zookeeper's
// blocking calls in a row, and waits for that goroutine or for ctx: the
// uncontended path costs one goroutine hand-off, not one per request. When
// ctx ends first, the goroutine deletes the node it made once it is done.
func (d *zkDriver) first(ctx context.Context, l *driver.Lease, kp string) (node, verdict, error) {
	type result struct {
		n node
		v verdict
	}
	var (
		mu        sync.Mutex
		abandoned bool
	)
	fu := &future[result]{done: make(chan struct{})}
	d.calls.Add(1)
	go func() {
		defer d.calls.Done()
		n, v, err := d.firstMoves(ctx, l, kp)
		mu.Lock()
		fu.v, fu.err = result{n, v}, err
		close(fu.done)
		gone := abandoned
		mu.Unlock()
		if gone && err == nil && n.path != "" {
			d.discard(kp, l.Owner, n.path)
		}
	}()
	select {
	case <-fu.done:
	case <-ctx.Done():
		mu.Lock()
		select {
		case <-fu.done: // done meanwhile: the result stands
		default:
			abandoned = true
		}
		mu.Unlock()
		if abandoned {
			return node{}, verdict{}, ctx.Err()
		}
	}
	return fu.v.n, fu.v.v, fu.err
}

// firstMoves is first's goroutine. It returns the node (no path when it
// deleted it) and its place in the queue.
func (d *zkDriver) firstMoves(ctx context.Context, l *driver.Lease, kp string) (node, verdict, error) {
	n, err := d.join(ctx, l, kp, false)
	if err != nil {
		return node{}, verdict{}, err
	}
	if n.alone && n.listing == nil {
		// The only child: granted, as a listing would show.
		return n, verdict{present: true, granted: true}, nil
	}
	v, err := d.inspect(context.WithoutCancel(ctx), kp, &n) // runs to the end
	if err != nil {
		d.discard(kp, l.Owner, n.path)
		return node{}, verdict{}, errors.Join(err, ctx.Err())
	}
	switch {
	case !v.present:
		return node{}, verdict{}, errors.Join(fmt.Errorf("zookeeper: lock node %s vanished right after its creation (session expired, or deleted by another client)", n.path), ctx.Err())
	case v.conflict != 0:
		d.discard(kp, l.Owner, n.path)
		return node{}, verdict{}, limitError(l, v)
	case !v.granted:
		d.discard(kp, l.Owner, n.path)
		n.path = ""
	}
	return n, v, nil
}

// transient reports whether err is a connection or session failure that a
// waiter rides out: go-zookeeper reconnects, and the session (with the
// node) survives if it does so within the session timeout.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// pause waits a little before a waiter tries again, and reports false if
// ctx ended first.
func (d *zkDriver) pause(ctx context.Context) bool {
	t := time.NewTimer(pollEvery(d.sessionTimeout()))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// grant fills l for the node n and registers it.
func (d *zkDriver) grant(l *driver.Lease, n node, validity time.Duration) {
	g := &grant{path: n.path, session: n.session}
	l.Token = uint64(n.czxid)
	l.Validity = validity
	l.Data = g
	d.mon.add(l, g)
}

// ensureProof makes sure session sid was proven alive recently (the
// heartbeat does that while waiting); else it syncs.
func (d *zkDriver) ensureProof(ctx context.Context, sid int64) error {
	since := time.Now().Add(-d.sessionTimeout() / 3)
	if d.mon.provenSince(sid, since) {
		return nil
	}
	if _, err := write(ctx, d, func() (string, error) { return d.conn.Sync("/") }); err != nil {
		return err
	}
	if !d.mon.provenSince(sid, since) {
		return fmt.Errorf("zookeeper: session %#x ended while waiting: %w", sid, zk.ErrSessionExpired)
	}
	return nil
}

// inspect lists kp's children and judges n's place in the queue; it uses
// the listing join sent with the create when that one shows n. When n's
// czxid or session is not known yet (a plain create, or a node found again
// after a lost reply), it also reads n's Stat, in the same round trip.
func (d *zkDriver) inspect(ctx context.Context, kp string, n *node) (verdict, error) {
	name := n.path[len(kp)+1:]
	var ex *future[existsResult]
	if n.czxid == 0 || n.session == 0 {
		ex = start(d, false, func() (existsResult, error) {
			ok, st, err := d.conn.Exists(n.path)
			return existsResult{ok, st}, err
		})
	}
	var (
		children []string
		err      error
	)
	if early := n.listing; early != nil {
		n.listing = nil
		children, err = early.wait(ctx)
		if err != nil || !slices.Contains(children, name) {
			d.relisted.Add(1) // sent before the create after all
			children = nil
		}
	}
	if children == nil {
		children, err = childrenOf(ctx, d, kp)
	}
	if errors.Is(err, zk.ErrNoNode) {
		return verdict{}, nil // the key node is gone, and the node with it
	}
	if err != nil {
		return verdict{}, err
	}
	if ex != nil {
		r, err := ex.wait(ctx)
		if err != nil {
			return verdict{}, err
		}
		if !r.ok {
			return verdict{}, nil
		}
		n.czxid, n.session = r.st.Czxid, r.st.EphemeralOwner
	}
	return judge(children, name), nil
}

// watch sets a watch on path and returns its channel and the node's Stat
// as the watch found it, or nil if path does not exist (then no watch is
// left behind).
func (d *zkDriver) watch(ctx context.Context, path string) (<-chan zk.Event, *zk.Stat, error) {
	type watched struct {
		ch <-chan zk.Event
		st *zk.Stat
	}
	r, err := read(ctx, d, func() (watched, error) {
		_, st, ch, err := d.conn.GetW(path)
		return watched{ch, st}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	return r.ch, r.st, err
}

// watchChildren lists kp's children and sets a watch on them, in one
// request; none when kp is gone (and the lock nodes with it).
func (d *zkDriver) watchChildren(ctx context.Context, kp string) ([]string, <-chan zk.Event, error) {
	type watched struct {
		children []string
		ch       <-chan zk.Event
	}
	r, err := read(ctx, d, func() (watched, error) {
		children, _, ch, err := d.conn.ChildrenW(kp)
		return watched{children, ch}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	return r.children, r.ch, err
}

// grantedData is what announce writes into a granted permit's node.
var grantedData = []byte("granted")

// announce writes the data of n, a permit node just granted, once, in the
// background, so that a permit waiting behind it with a data watch on it
// wakes and lists the queue again: that waiter's turn may have come (see
// judge). It retries through a lost connection while n's session lives;
// a node already released needs no announcement (its deletion fired the
// watch).
func (d *zkDriver) announce(n node) {
	d.calls.Add(1)
	go func() {
		defer d.calls.Done()
		ctx := d.mon.ctx
		for d.conn.SessionID() == n.session {
			_, err := write(ctx, d, func() (*zk.Stat, error) { return d.conn.Set(n.path, grantedData, -1) })
			if err == nil || !transient(err) && !ambiguous(err) || !d.pause(ctx) {
				return
			}
		}
	}()
}

// limitError is the refusal of l, a permit, whose limit differs from that
// of the permit before it that v names.
func limitError(l *driver.Lease, v verdict) error {
	return fmt.Errorf("%w: zookeeper: the key is a semaphore of %d permits (node %s), not %d", driver.ErrInvalid, v.conflict, v.conflictNode, l.Limit)
}
