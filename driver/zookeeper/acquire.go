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
	n, v, err := d.first(ctx, l, d.keyPath(l.Key), false)
	if err != nil {
		return err
	}
	if !v.granted {
		return &driver.HeldError{}
	}
	d.grant(l, n, d.sessionTimeout())
	return nil
}

// AcquireWait is Lock and RLock: create the node, then until it is
// granted: list the queue; if something earlier blocks the node, watch the
// nearest blocker (getData with a watch, as zk.Lock and Curator do) and
// wait for it to go. A lost connection is waited out, keeping the node
// (its session survives a reconnection within the session timeout; if it
// does not, the node is gone and the waiter queues again). When ctx ends
// or on any other failure, the node is deleted before returning (when ctx
// ends while the create is under way, as soon as its reply comes). Round
// trips: 1 when the key is free (the create's reply shows the node alone);
// else 1 to list the queue, 1 to set the watch, and after the release the
// server's notification and 1 more listing.
//
// The requests are made by one goroutine (see queue), in a row, and the
// call waits for it or for ctx. So a hand-off (the watch fires, the waiter
// lists the queue and finds itself first) starts no goroutine: on a loaded
// machine, a contended key's throughput is the hand-offs' latency.
func (d *zkDriver) AcquireWait(ctx context.Context, l *driver.Lease) error {
	d.mon.waiting(1)
	defer d.mon.waiting(-1)
	kp := d.keyPath(l.Key)
	q := &queue{done: make(chan struct{})}
	d.calls.Add(1)
	go func() {
		defer d.calls.Done()
		d.queue(ctx, l, kp, q)
	}()
	select {
	case <-q.done:
	case <-ctx.Done():
		q.mu.Lock()
		select {
		case <-q.done: // done meanwhile: the result stands
		default:
			q.abandoned = true
		}
		abandoned, path := q.abandoned, q.path
		q.mu.Unlock()
		if abandoned {
			// The goroutine deletes a node it makes from now on; this
			// one is ours to delete.
			if path != "" {
				d.discard(kp, l.Owner, path)
			}
			return ctx.Err()
		}
	}
	if q.err != nil {
		return q.err
	}
	// The grant's validity starts at the listing that granted it.
	d.grant(l, q.n, d.sessionTimeout())
	l.Sent = q.listed
	return nil
}

// queue is the state AcquireWait shares with its goroutine.
type queue struct {
	done chan struct{} // closed with the outcome: n and listed, or err
	n    node
	// listed is when the listing that granted n was sent.
	listed time.Time
	err    error

	mu        sync.Mutex
	path      string // the node the goroutine holds in the queue, if any
	abandoned bool   // AcquireWait returned: ctx ended
}

// hold records that the goroutine holds the node at path ("" for none)
// and reports false when the caller has gone: then the node is the
// goroutine's to delete.
func (q *queue) hold(path string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.path = path
	return !q.abandoned
}

// finish hands the outcome to AcquireWait.
func (q *queue) finish(n node, listed time.Time, err error) {
	q.mu.Lock()
	q.n, q.listed, q.err = n, listed, err
	close(q.done)
	q.mu.Unlock()
}

// queue is AcquireWait's goroutine: it makes the requests, with
// go-zookeeper's blocking calls in a row (ctx only for pauses and for
// waiting on the watch), and finishes q with the grant or with a failure,
// having deleted its node on a failure. When ctx ends it just stops:
// AcquireWait, which sees ctx end too, deletes the node it held (and the
// goroutine deletes one it makes after that).
func (d *zkDriver) queue(ctx context.Context, l *driver.Lease, kp string, q *queue) {
	bg := context.WithoutCancel(ctx) // requests run to the end
	var (
		n      node
		v      verdict
		err    error
		listed time.Time
	)
	fail := func(err error) {
		if ctx.Err() != nil {
			return // AcquireWait deletes the node
		}
		d.discard(kp, l.Owner, n.path)
		q.finish(node{}, time.Time{}, err)
	}
	for queued := false; ; {
		if ctx.Err() != nil {
			return // AcquireWait deletes the node
		}
		if !queued {
			listed = time.Now()
			if n, v, err = d.firstMoves(ctx, l, kp, true); err != nil {
				if ctx.Err() == nil {
					q.finish(node{}, time.Time{}, err) // firstMoves deleted the node
				}
				return
			}
			if !q.hold(n.path) {
				d.discard(kp, l.Owner, n.path)
				return
			}
			queued = true
		}
		if v.granted {
			if err = d.ensureProof(ctx, n.session); err == nil {
				q.finish(n, listed, nil)
				return
			}
		} else if ch, werr := d.watch(bg, kp+"/"+v.watch); werr != nil {
			err = werr
		} else if ch != nil {
			select {
			case <-ch:
				// Deleted, changed, or the watch ended with the session or
				// the connection: the next listing tells.
			case <-ctx.Done():
				return
			}
		}
		for { // list the queue again, waiting out a lost connection
			if err != nil && !(transient(err) && d.pause(ctx)) {
				fail(err)
				return
			}
			listed = time.Now()
			if v, err = d.inspect(bg, kp, &n); err == nil {
				break
			}
		}
		if !v.present {
			// The node is gone: its session expired, or another client
			// deleted it. Queue again, at the back.
			if !q.hold("") {
				return
			}
			queued = false
		}
	}
}

// first makes the first moves of an attempt: join the queue and list it,
// and for TryLock (!wait) leave again when the key is held. It makes them
// in one goroutine, with go-zookeeper's blocking calls in a row, and waits
// for that goroutine or for ctx: the uncontended path costs one goroutine
// hand-off, not one per request. When ctx ends first, the goroutine
// deletes the node it made once it is done.
func (d *zkDriver) first(ctx context.Context, l *driver.Lease, kp string, wait bool) (node, verdict, error) {
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
		n, v, err := d.firstMoves(ctx, l, kp, wait)
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
func (d *zkDriver) firstMoves(ctx context.Context, l *driver.Lease, kp string, wait bool) (node, verdict, error) {
	bg := context.WithoutCancel(ctx) // requests run to the end; ctx is for pauses
	for {
		n, err := d.join(ctx, l, kp, wait)
		if err != nil {
			return node{}, verdict{}, err
		}
		if n.alone && n.listing == nil {
			// The only child: granted, as a listing would show.
			return n, verdict{present: true, granted: true}, nil
		}
		v, err := d.inspect(bg, kp, &n)
		for err != nil && wait && transient(err) && d.pause(ctx) {
			v, err = d.inspect(bg, kp, &n)
		}
		if err != nil {
			d.discard(kp, l.Owner, n.path)
			return node{}, verdict{}, errors.Join(err, ctx.Err())
		}
		switch {
		case !v.present && wait && ctx.Err() == nil:
			continue // gone already (session expired?): queue again
		case !v.present:
			return node{}, verdict{}, errors.Join(fmt.Errorf("zookeeper: lock node %s vanished right after its creation (session expired, or deleted by another client)", n.path), ctx.Err())
		case !v.granted && !wait:
			d.discard(kp, l.Owner, n.path)
			n.path = ""
		}
		return n, v, nil
	}
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

// watch sets a watch on path and returns its channel, or nil if path does
// not exist (then no watch is left behind).
func (d *zkDriver) watch(ctx context.Context, path string) (<-chan zk.Event, error) {
	ch, err := read(ctx, d, func() (<-chan zk.Event, error) {
		_, _, ch, err := d.conn.GetW(path)
		return ch, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return ch, err
}
