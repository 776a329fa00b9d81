package lock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// MaxKeys is the most keys one LockMany or TryLockMany takes.
const MaxKeys = 64

// LockMany blocks until every key of keys is granted to the caller, as
// one set, or until ctx ends or the retry strategy gives up; it returns
// one MultiLease for the set. keys holds 1 to MaxKeys distinct valid keys,
// in any order; opts apply to every key.
//
// All or nothing: a LockMany that fails (ctx ended, the backend failed,
// the retry strategy gave up) leaves none of the set held. The keys it
// had taken are released as it returns, each as Unlock releases a lease:
// within ctx, and in the background once ctx has ended or when the
// backend fails, so that the call still returns by ctx's end; a step
// whose outcome is unknown is cleaned up as after a failed Lock.
//
// How the set is taken (MultiLease.Atomic says which): where the driver
// can take a set in one backend step (driver.SetAcquirer), LockMany
// first tries that. Otherwise, or when that finds a key held, it takes
// the keys one at a time in sorted order (the global order every LockMany
// uses), each with Lock's own waiting, renewal and clean-up.
//
//   - No deadlock: every LockMany waits for its keys in the same order, so
//     no two can each hold a key the other waits for (a one-step try holds
//     nothing while it tries).
//   - No starvation where the backend queues waiters (memory, Redis,
//     ZooKeeper, PostgreSQL, etc: see Locker.Lock): each key is granted
//     in arrival order, so a waiting LockMany is not passed forever by
//     later arrivals. On a backend that polls (memcached, or any Lock
//     with an explicit retry strategy) waiters are served in no order,
//     and a LockMany, which waits for each of its keys in turn, may be
//     passed by others for as long as they keep arriving.
//
// A named owner (WithOwner), and a call with a note (WithNote), takes its
// keys one by one, never in one step.
// Errors are those of Lock, naming the key whose attempt failed (a
// one-step attempt names the set's first key); bad input (a nil ctx, no
// keys, more than MaxKeys, a duplicate, an invalid key) wraps ErrInvalid.
func (lk *Locker) LockMany(ctx context.Context, keys []string, opts ...Option) (*MultiLease, error) {
	return lk.acquireMany(ctx, "lockmany", keys, true, opts)
}

// TryLockMany makes one attempt at the set, as LockMany does without
// waiting: in one backend step where the driver has one
// (driver.SetAcquirer), else one TryLock per key in sorted order,
// releasing the keys taken as soon as one is held. A held key gives an
// error wrapping ErrNotAcquired and ErrHeld, and none of the set is left
// held; errors otherwise as LockMany.
func (lk *Locker) TryLockMany(ctx context.Context, keys []string, opts ...Option) (*MultiLease, error) {
	return lk.acquireMany(ctx, "trylockmany", keys, false, opts)
}

func (lk *Locker) acquireMany(ctx context.Context, op string, keys []string, wait bool, opts []Option) (*MultiLease, error) {
	sorted, err := lk.checkMany(ctx, op, keys)
	if err != nil {
		return nil, err
	}
	co, err := lk.options(op, sorted[0], opts)
	if err != nil {
		return nil, err
	}
	ls, err := lk.setLeases(op, sorted, co)
	if err != nil {
		return nil, err
	}
	if sa, ok := lk.d.(driver.SetAcquirer); ok && len(sorted) > 1 && !co.named && co.note == "" {
		fallBack, err := lk.takeSet(ctx, op, ls, sa)
		switch {
		case err == nil:
			return newMulti(sorted, ls, true), nil
		case !fallBack, !wait && !errors.Is(err, driver.ErrNotAtomic):
			return nil, err
		}
	}
	got, err := lk.takeInOrder(ctx, op, sorted, wait, opts)
	if err != nil {
		return nil, err
	}
	return newMulti(sorted, got, false), nil
}

// checkMany checks a set's arguments and returns its keys sorted.
func (lk *Locker) checkMany(ctx context.Context, op string, keys []string) ([]string, error) {
	first := ""
	if len(keys) > 0 {
		first = keys[0]
	}
	switch {
	case lk == nil:
		return nil, newError(op, first, ErrInvalid, errNilLocker)
	case ctx == nil:
		return nil, newError(op, first, ErrInvalid, errNilContext)
	case lk.optsErr != nil:
		return nil, newError(op, first, ErrInvalid, lk.optsErr)
	case len(keys) == 0:
		return nil, newError(op, "", ErrInvalid, errors.New("no keys"))
	case len(keys) > MaxKeys:
		return nil, newError(op, first, ErrInvalid, fmt.Errorf("%d keys, more than MaxKeys (%d)", len(keys), MaxKeys))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if err := checkKey(k); err != nil {
			return nil, newError(op, k, ErrInvalid, err)
		}
		if i > 0 && sorted[i-1] == k {
			return nil, newError(op, k, ErrInvalid, errors.New("key given twice"))
		}
	}
	return sorted, nil
}

// setLeases makes the Leases of a one-step attempt at keys, which also
// has the driver check every key before any I/O.
func (lk *Locker) setLeases(op string, keys []string, co callOptions) ([]*Lease, error) {
	if co.note != "" {
		if err := lk.refuse(op, keys[0], Notes); err != nil {
			return nil, err
		}
	}
	ls := make([]*Lease, len(keys))
	for i, k := range keys {
		l, err := lk.newLease(op, co, driver.Lease{Key: k, Owner: newOwner(), Mode: driver.Exclusive, TTL: co.ttl, Note: co.note})
		if err != nil {
			return nil, err
		}
		ls[i] = l
	}
	return ls, nil
}

// takeSet makes one attempt at the set of ls in one backend step, and
// registers its leases if it granted them. fallBack says that the keys
// may still be taken one by one: the step found a key held, failed, or
// could not take this set (driver.ErrNotAtomic); not when the input was
// refused, the Locker closed or ctx ended.
func (lk *Locker) takeSet(parent context.Context, op string, ls []*Lease, sa driver.SetAcquirer) (fallBack bool, err error) {
	key := ls[0].dl.Key
	sc, err := lk.enter(parent, op, key)
	if err != nil {
		return false, err
	}
	defer sc.exit()
	dls := make([]*driver.Lease, len(ls))
	for i, l := range ls {
		dls[i] = l.dl
	}
	start := time.Now()
	ok, err := lk.within(sc.ctx, func() error { return sa.AcquireSet(sc.ctx, dls) },
		func(err error) { lk.settleSet(dls, err, true) })
	switch {
	case !ok:
		return false, ctxError(op, key, ErrNotAcquired, sc.ctx)
	case errors.Is(err, driver.ErrNotAtomic):
		return true, err
	case errors.Is(err, driver.ErrInvalid):
		return false, newError(op, key, ErrInvalid, err)
	case err != nil:
		lk.settleSet(dls, err, false)
		if sc.ctx.Err() != nil {
			return false, ctxError(op, key, ErrNotAcquired, sc.ctx)
		}
		return true, newError(op, key, ErrNotAcquired, notAcquiredCause(err))
	}
	starts := make([]time.Time, len(ls))
	for i, l := range ls {
		if starts[i], err = lk.revive(sc.ctx, l.dl, start, false); err != nil {
			lk.settleSet(dls, nil, true)
			return sc.ctx.Err() == nil, newError(op, l.dl.Key, ErrNotAcquired, err)
		}
	}
	var registered []*Lease
	for i, l := range ls {
		if err = lk.register(op, l, starts[i]); err != nil {
			// register released l (the Locker closed); no one will hold
			// the members after it either.
			lk.settleSet(dls[i+1:], nil, true)
			break
		}
		registered = append(registered, l)
	}
	if err != nil {
		lk.unlockAll(parent, registered)
		return false, err
	}
	return false, nil
}

// settleSet starts the clean-up of a one-step attempt at dls that
// returned err: a grant that no one will hold (abandoned) or an outcome
// that is unknown is released by owner, key by key, in the background.
func (lk *Locker) settleSet(dls []*driver.Lease, err error, abandoned bool) {
	v := failure(err)
	switch {
	case err == nil && !abandoned, errors.Is(err, driver.ErrNotAtomic):
		return
	case err != nil && v != unknown && v != unreachable:
		return
	}
	for _, dl := range dls {
		lk.releaseAfter(err, dl, time.Now().Add(dl.TTL))
	}
}

// takeInOrder takes keys (sorted) one by one, each as Lock (wait) or
// TryLock does; when one fails, it releases those it took and returns
// that key's error.
func (lk *Locker) takeInOrder(ctx context.Context, op string, keys []string, wait bool, opts []Option) ([]*Lease, error) {
	ls := make([]*Lease, 0, len(keys))
	for _, k := range keys {
		l, err := lk.acquire(ctx, op, k, driver.Exclusive, 0, wait, opts)
		if err != nil {
			lk.unlockAll(ctx, ls)
			return nil, err
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		if err := l.Err(); err != nil { // lost while a later key was awaited
			lk.unlockAll(ctx, ls)
			return nil, newError(op, l.dl.Key, ErrNotAcquired, err)
		}
	}
	return ls, nil
}

// unlockAll releases ls after a failed attempt at a set, each as Unlock
// does within ctx: a release that ctx's end cuts short, or that fails,
// goes on in the background (until the grant would have expired), so that
// the call still returns by ctx's end.
func (lk *Locker) unlockAll(ctx context.Context, ls []*Lease) {
	for _, l := range ls {
		l.Unlock(ctx)
	}
}

// A MultiLease is a set of keys held as one (LockMany, TryLockMany): one
// Lease per key, one Done, one Unlock. It is safe for concurrent use.
//
// Each member is a Lease like any other (renewed, lost, fenced on its own
// Token); the set is held while every member is. Work guarded by the set
// watches Done, which closes when any member ends, and then calls Unlock
// to release the others.
type MultiLease struct {
	keys   []string // sorted
	leases []*Lease // in keys' order
	atomic bool
	done   chan struct{}

	mu  sync.Mutex
	err error // the first member's to end, once done is closed
}

// newMulti returns the MultiLease of leases ls of keys, and starts the
// goroutine that closes its Done when a member ends.
func newMulti(keys []string, ls []*Lease, atomic bool) *MultiLease {
	m := &MultiLease{keys: keys, leases: ls, atomic: atomic, done: make(chan struct{})}
	cases := make([]reflect.SelectCase, len(ls))
	for i, l := range ls {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.Done())}
	}
	go func() {
		i, _, _ := reflect.Select(cases)
		m.mu.Lock()
		m.err = ls[i].Err()
		m.mu.Unlock()
		close(m.done)
	}()
	return m
}

var errNoMulti = errors.New("not a MultiLease granted by a Locker (a nil or zero *MultiLease)")

func (m *MultiLease) invalid() bool { return m == nil || m.done == nil }

// Keys returns the set's keys, sorted.
func (m *MultiLease) Keys() []string {
	if m.invalid() {
		return nil
	}
	return slices.Clone(m.keys)
}

// Token returns the fencing token of key's lease, and false (and zero)
// for a key not in the set.
func (m *MultiLease) Token(key string) (uint64, bool) {
	if m.invalid() {
		return 0, false
	}
	i, ok := slices.BinarySearch(m.keys, key)
	if !ok {
		return 0, false
	}
	return m.leases[i].Token(), true
}

// Leases returns the set's leases, in the order of Keys.
func (m *MultiLease) Leases() []*Lease {
	if m.invalid() {
		return nil
	}
	return slices.Clone(m.leases)
}

// Atomic reports whether the set was taken in one backend step
// (driver.SetAcquirer); false: its keys were taken one by one in sorted
// order.
func (m *MultiLease) Atomic() bool { return !m.invalid() && m.atomic }

// Done returns a channel that is closed when any member of the set ends
// (lost, released, or ended by Locker.Close), and so no later than that
// member's own Done closes plus a goroutine's wake-up. For a nil or zero
// MultiLease it is closed.
func (m *MultiLease) Done() <-chan struct{} {
	if m.invalid() {
		return closedChan
	}
	return m.done
}

// Err returns nil while Done is open; after, the Err of the member that
// ended first (wrapping ErrLost for a lost member). A nil or zero
// MultiLease gives ErrInvalid.
func (m *MultiLease) Err() error {
	if m.invalid() {
		return newError("multilease", "", ErrInvalid, errNoMulti)
	}
	select {
	case <-m.done:
	default:
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Unlock releases every member, as Lease.Unlock does each, and returns
// their errors joined (nil when all were released): a member already
// lost or released gives an error wrapping ErrNotHeld. Every member ends
// whatever the outcome. A nil ctx gives ErrInvalid, and the members are
// released in the background, as Lease.Unlock does.
func (m *MultiLease) Unlock(ctx context.Context) error {
	if m.invalid() {
		return newError("unlock", "", ErrInvalid, errNoMulti)
	}
	var errs []error
	for _, l := range m.leases {
		errs = append(errs, l.Unlock(ctx))
	}
	<-m.done
	return errors.Join(errs...)
}
