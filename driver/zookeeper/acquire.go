package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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
	return unreachable(d.acquire(ctx, l))
}

func (d *zkDriver) acquire(ctx context.Context, l *driver.Lease) error {
	if err := d.start.await(ctx); err != nil {
		return err
	}
	begin := time.Now()
	kp := d.keyPath(l.Key)
	n, v, err := d.first(ctx, l, kp)
	if err != nil {
		return err
	}
	if !v.granted {
		return &driver.HeldError{}
	}
	if err := d.ensureProof(ctx, n.session); err != nil {
		d.discard(kp, l.Owner, n.path)
		return err
	}
	d.grant(l, n, d.mon.validitySince(begin, n.session, d.sessionTimeout()))
	return nil
}

// Lock, RLock and Acquire are the steps of driver.Queuer, which lock
// drives: Join creates the node and lists the queue; if something earlier
// blocks the node, it watches the blockers judge names (getData with a
// watch, as zk.Lock and Curator do: the predecessor, the nearest writer,
// or a permit's N predecessors). A watch's firing wakes lock, whose Check
// lists the queue again; a Check before one fires costs nothing. A lost connection
// is waited out, keeping the node (its session survives a reconnection
// within the session timeout; if it does not, the node is gone and the
// waiter queues again). Leave deletes the node. Round trips: 1 when the
// key is free (the create's reply shows the node alone); else 1 to list
// the queue, 1 to set the watch, and after the release the server's
// notification and 1 more listing (none when the last listing showed one
// node before the waiter's: see waiter.turn).

// waiter is l.Data while l waits, from Join to the grant or Leave.
type waiter struct {
	kp   string
	n    node // the node in the queue; no path when not queued
	wake chan<- struct{}
	// fired is closed when one of the watches set on the blockers fires;
	// nil when none is set (none was needed, or a step failed), so that
	// the next Check lists the queue.
	fired chan struct{}
	// watches are the watches set, by the path of the node watched; those
	// that have not fired are kept for the next step (go-zookeeper cannot
	// remove a watch, and setting it again costs a round trip).
	watches map[string]<-chan zk.Event
	// sole is the path of the one lock node before the node at the last
	// listing, when exactly one was (see verdict.sole); firedPath and
	// event are the watch that fired and its event, written by await
	// before it closes fired.
	sole      string
	firedPath string
	// own is a watch on the node itself, set with the blocker's when sole
	// is, on the node ownPath: turn needs it not fired (see turn).
	own     <-chan zk.Event
	ownPath string
	event   zk.Event
	stop    chan struct{} // closed by end: the watch's goroutine stops
	ended   sync.Once
}

// Join implements driver.Queuer.
func (d *zkDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	if err := d.start.await(ctx); err != nil {
		return err // not queued: Leave has nothing to do
	}
	w := &waiter{kp: d.keyPath(l.Key), wake: wake, stop: make(chan struct{})}
	l.Data = w
	d.mon.waiting(1) // the monitor proves the session while l waits
	return d.step(ctx, l, w, false)
}

// Check implements driver.Queuer. While the watch has not fired, the
// blocker is still there (or the connection is down, which the watch
// outlives): nothing to ask the server.
func (d *zkDriver) Check(ctx context.Context, l *driver.Lease) error {
	w, ok := l.Data.(*waiter)
	if !ok {
		return fmt.Errorf("zookeeper: Check of %s without Join", l.Key)
	}
	turn := false
	if w.fired != nil {
		select {
		case <-w.fired:
			w.fired = nil
			turn = w.turn()
		default:
			return &driver.HeldError{}
		}
	}
	return d.step(ctx, l, w, turn)
}

// turn reports whether the watch that fired shows that w's node is first:
// it was the deletion of the one lock node before it at the last listing.
// Sequence numbers only grow, so no node can have come before it since,
// and a listing would show it first: the step grants without one, as
// zk.Lock's and Curator's waiters cannot (they list again). The node is
// still there unless its session ended, which the step checks, or another
// client deleted it, which a listing made after the notification would
// not rule out either (the deletion may come right after it).
//
// The node's own watch must not have fired: a node deleted while it waited
// (by an operator, or another recipe's clean-up) is not in the queue, and
// a waiter that queued behind the same blocker since then is first. The
// server sends a client's watch events in the order of the changes, so the
// node's deletion, if it came before the blocker's, was delivered before
// the blocker's event. A node deleted after the blocker is as a holder's
// node deleted right after a listing granted it.
func (w *waiter) turn() bool {
	if w.own == nil || w.ownPath != w.n.path || firedAlready(w.own) {
		w.own, w.ownPath = nil, ""
		return false
	}
	return w.sole != "" && w.firedPath == w.sole && w.event.Type == zk.EventNodeDeleted && w.event.Err == nil
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
//
// With turn set (see waiter.turn), the node is first: the step grants
// without a listing, provided its session is still the node's.
func (d *zkDriver) step(ctx context.Context, l *driver.Lease, w *waiter, turn bool) error {
	begin := time.Now() // lock counts the validity from a moment before
	bg := context.WithoutCancel(ctx)
	ride := func(err error) error {
		if transient(err) {
			return &driver.HeldError{RetryAfter: pollEvery(d.sessionTimeout())}
		}
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var v verdict
		if turn && w.n.path != "" && w.n.session != 0 && w.n.session == d.conn.SessionID() {
			v = verdict{present: true, granted: true}
		}
		turn = false
		if w.n.path == "" {
			n, err := d.join(ctx, l, w.kp, true)
			if err != nil {
				return err
			}
			w.n = n
			if n.alone && n.listing == nil {
				// The only child: granted, as a listing would show.
				v = verdict{present: true, granted: true}
			}
		}
		if !v.granted {
			var err error
			if v, err = d.inspect(bg, w.kp, &w.n); err != nil {
				return ride(err)
			}
			w.sole = ""
			if v.sole != "" {
				w.sole = w.kp + "/" + v.sole
			}
		}
		switch {
		case !v.present:
			// The node is gone: its session expired, or another client
			// deleted it. Queue again, at the back.
			w.n, w.watches = node{}, nil
			continue
		case v.conflict != 0:
			d.discard(w.kp, l.Owner, w.n.path)
			w.n = node{}
			return limitError(l, v)
		case v.granted:
			if err := d.ensureProof(ctx, w.n.session); err != nil {
				return ride(err)
			}
			// The leader heard from the session at most half its
			// timeout ago, maybe before the step began: the grant lasts
			// as long as the session may, counted from then.
			d.grant(l, w.n, d.mon.validitySince(begin, w.n.session, d.sessionTimeout()))
			d.end(w)
			return nil
		}
		var own *future[watched]
		ownPath := w.n.path
		if w.sole != "" && (w.own == nil || w.ownPath != ownPath || firedAlready(w.own)) {
			// The node's own watch, for turn, in the round trip of the
			// blocker's.
			w.own, w.ownPath = nil, ""
			own = start(d, false, func() (watched, error) { return d.getW(ownPath) })
		}
		armed, err := d.watchAll(bg, w, v.watch)
		if own != nil {
			if r, oerr := own.wait(bg); oerr == nil {
				w.own, w.ownPath = r.ch, ownPath
			}
		}
		if err != nil {
			return ride(err)
		}
		if armed {
			return &driver.HeldError{}
		}
		// A blocker is gone already: list again.
	}
}

// watchAll sets a watch on each of the nodes names of w's key (keeping
// those set by an earlier step that have not fired, and setting the others
// in one round trip) and makes the next Check wait until one fires. It
// reports false, arming nothing, when one of the nodes is gone already.
func (d *zkDriver) watchAll(ctx context.Context, w *waiter, names []string) (bool, error) {
	type pending struct {
		path string
		fu   *future[watched]
	}
	kept := make(map[string]<-chan zk.Event, len(names))
	var todo []pending
	for _, name := range names {
		path := w.kp + "/" + name
		if ch, ok := w.watches[path]; ok && !firedAlready(ch) {
			kept[path] = ch
			continue
		}
		todo = append(todo, pending{path: path})
	}
	if len(todo) == 1 {
		// One watch to set (an exclusive waiter's): in this goroutine.
		r, err := run(d, false, func() (watched, error) { return d.getW(todo[0].path) })
		todo[0].fu = &future[watched]{done: closedChan, v: r, err: err}
	} else {
		for i := range todo {
			path := todo[i].path
			todo[i].fu = start(d, false, func() (watched, error) { return d.getW(path) })
		}
	}
	w.watches = kept // the fired ones are dropped; new ones join below
	gone := false
	var errs []error
	for _, p := range todo {
		r, err := p.fu.wait(ctx)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			gone = true
		case err != nil:
			errs = append(errs, err)
		default:
			kept[p.path] = r.ch
		}
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if gone || len(kept) == 0 {
		return false, nil
	}
	paths := make([]string, 0, len(kept))
	chs := make([]<-chan zk.Event, 0, len(kept))
	for path, ch := range kept {
		paths = append(paths, path)
		chs = append(chs, ch)
	}
	w.fired = make(chan struct{})
	go w.await(paths, chs, w.fired, d.mon.stop)
	return true, nil
}

// closedChan is the done channel of a future made already.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// firedAlready reports whether the watch ch has fired (go-zookeeper
// closes a watch's channel once it delivered its event).
func firedAlready(ch <-chan zk.Event) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// await waits for one of the watches chs (of the nodes paths: a blocker
// deleted or changed, or the watches ended with the session or the
// connection: the next step tells), records it in w.firedPath and
// w.event, and wakes lock. go-zookeeper cannot remove a watch, but its
// channels are buffered: when the wait ends first (or the driver closes),
// the goroutine just stops.
func (w *waiter) await(paths []string, chs []<-chan zk.Event, fired, closed chan struct{}) {
	if len(chs) == 1 { // an exclusive waiter's: no reflection
		select {
		case <-w.stop:
			return
		case <-closed:
			return
		case ev := <-chs[0]:
			w.firedPath, w.event = paths[0], ev
		}
	} else {
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.stop)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(closed)},
		}
		for _, ch := range chs {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		i, v, ok := reflect.Select(cases)
		if i < 2 {
			return
		}
		w.firedPath = paths[i-2]
		if ok {
			w.event, _ = v.Interface().(zk.Event)
		}
	}
	close(fired)
	select {
	case w.wake <- struct{}{}:
	default:
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

// unreachable marks err as driver.ErrUnavailable when it is a transient
// failure or a network one.
func unreachable(err error) error {
	if transient(err) {
		return driver.Unavailable(err)
	}
	return driver.MarkNetFailure(err)
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

// ensureProof makes sure the leader heard from session sid in the last
// half timeout (the heartbeat keeps it so while the Locker has work), so
// that a grant has half the timeout at least. Else it syncs, which proves
// the requests answered reportLag before it (see monitor.answered); when
// none is that old yet, it waits until one is (at most reportLag, on a
// Locker that was idle) and syncs again.
func (d *zkDriver) ensureProof(ctx context.Context, sid int64) error {
	since := time.Now().Add(-d.sessionTimeout() / 2)
	for range 2 {
		if d.mon.provenSince(sid, since) {
			return nil
		}
		if at, ok := d.mon.provableAt(sid, since); ok {
			t := time.NewTimer(time.Until(at))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		if _, err := write(ctx, d, func() (string, error) { return d.conn.Sync("/") }); err != nil {
			return err
		}
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

// watched is a node's Stat and the watch set on it by getW.
type watched struct {
	ch <-chan zk.Event
	st *zk.Stat
}

// getW reads the node at path with a data watch, which fires when the
// node is deleted or written; zk.ErrNoNode when it does not exist (then no
// watch is left behind).
func (d *zkDriver) getW(path string) (watched, error) {
	_, st, ch, err := d.conn.GetW(path)
	return watched{ch, st}, err
}

// limitError is the refusal of l, a permit, whose limit differs from that
// of the permit before it that v names.
func limitError(l *driver.Lease, v verdict) error {
	return fmt.Errorf("%w: zookeeper: the key is a semaphore of %d permits (node %s), not %d", driver.ErrInvalid, v.conflict, v.conflictNode, l.Limit)
}
