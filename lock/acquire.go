package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// An acquisition (Lock, TryLock, RLock, TryRLock, Acquire, TryAcquire)
// makes attempts at a grant through a waiter, one type per way of waiting
// for a held key: queueWaiter waits in the driver's queue, subscriber
// polls woken by release news, poller polls, and once (the Try calls)
// does not wait. Each attempt's outcome is sorted by settle, which also
// starts every clean-up that an attempt leaves to the background.

// doAcquire is acquire without its measurement.
func (lk *Locker) doAcquire(parent context.Context, op, key string, mode driver.Mode, limit int, wait bool, opts []Option) (*Lease, error) {
	argErr := checkKey(key)
	if argErr == nil && mode == driver.Permit {
		argErr = checkLimit(limit)
	}
	if err := lk.checkCall(op, key, argErr); err != nil {
		return nil, err
	}
	if err := lk.refuseMode(op, key, mode); err != nil {
		return nil, err
	}
	co, err := lk.options(op, key, opts)
	if err != nil {
		return nil, err
	}
	owner, err := lk.owner(op, key, mode, co)
	if err != nil {
		return nil, err
	}
	if co.note != "" {
		if err := lk.refuse(op, key, Notes); err != nil {
			return nil, err
		}
	}
	l, err := lk.newLease(op, co, driver.Lease{Key: key, Owner: owner, Mode: mode, Limit: limit, TTL: co.ttl, Reentry: co.named, Note: co.note})
	if err != nil {
		return nil, err
	}
	sc, err := lk.enter(parent, op, key)
	if err != nil {
		return nil, err
	}
	defer sc.exit()
	w := lk.newWaiter(attempt{lk: lk, op: op, ctx: sc.ctx, dl: l.dl}, co.retry, wait)
	defer w.stop()
	var outage error // the last attempt's, while the backend is unreachable
	base := *l.dl    // as validated, before any attempt
	for {
		v, start, err := w.try()
		switch v {
		case granted:
			if err := lk.register(op, l, start); err != nil {
				return nil, err
			}
			return l, nil
		case ctxEnded:
			return nil, duringOutage(ctxError(op, key, ErrNotAcquired, sc.ctx), outage)
		case invalid:
			return nil, newError(op, key, ErrInvalid, err)
		case unknown, unreachable:
			if sc.ctx.Err() != nil {
				return nil, duringOutage(ctxError(op, key, ErrNotAcquired, sc.ctx), outage)
			}
			if v == unknown || !wait {
				return nil, newError(op, key, ErrNotAcquired, notAcquiredCause(err))
			}
			outage = err
		default:
			outage = nil
		}
		if err := w.next(v, err); err != nil {
			return nil, duringOutage(err, outage)
		}
		if v == unreachable {
			// The attempt's outcome is unknown and its clean-up, by
			// owner, goes on in the background: the next attempt is
			// one of a new owner, which that clean-up cannot touch.
			dl := base
			dl.Owner, _ = lk.owner(op, key, mode, co)
			l.dl = &dl
			w.retarget(l.dl)
		}
	}
}

// duringOutage adds to err, the error of a waiting call that ended, the
// unreachable backend's error of its last attempt, if it had one.
func duringOutage(err, outage error) error {
	var e *Error
	if outage == nil || !errors.As(err, &e) {
		return err
	}
	e.Err = errors.Join(e.Err, unavailableError{outage})
	return err
}

// owner returns the owner token of an acquisition: a fresh one, or, for
// WithOwner, the named owner's, where mode and the driver allow it.
func (lk *Locker) owner(op, key string, mode driver.Mode, co callOptions) (string, error) {
	if !co.named {
		return newOwner(), nil
	}
	if mode != driver.Exclusive {
		return "", newError(op, key, ErrInvalid, fmt.Errorf("WithOwner is for exclusive leases: %s leases are not reentrant", mode))
	}
	if err := lk.refuse(op, key, Reentry); err != nil {
		return "", err
	}
	return namedOwner(co.owner), nil
}

// refuseMode refuses a grant of mode where the backend has none.
func (lk *Locker) refuseMode(op, key string, mode driver.Mode) error {
	switch mode {
	case driver.Shared:
		return lk.refuse(op, key, SharedLeases)
	case driver.Permit:
		return lk.refuse(op, key, Permits)
	}
	return nil
}

// A waiter makes an acquisition's attempts and waits between them.
type waiter interface {
	// try makes one attempt and sorts its outcome (settle): the verdict,
	// when the granting request was sent, and the attempt's error.
	try() (verdict, time.Time, error)
	// next waits, after an attempt that came to held or late with err,
	// until the next attempt is due, and returns nil; or it returns the
	// error that ends the call.
	next(v verdict, err error) error
	// stop ends what the waiter holds (a subscription) when the call ends.
	stop()
	// retarget makes the next attempts at dl, a lease of a new owner.
	retarget(dl *driver.Lease)
}

// newWaiter returns the waiter of an acquisition: once for a Try call;
// under DefaultRetry, on a Queuer, queueWaiter (a named owner's Lock is
// never queued); on a Notifier, subscriber; else poller.
func (lk *Locker) newWaiter(a attempt, retry RetryStrategy, wait bool) waiter {
	switch {
	case !wait:
		return &once{a}
	case lk.queuer != nil && queues(retry) && !a.dl.Reentry:
		return &queueWaiter{attempt: a, pacer: pacer{retry: retry}}
	case lk.notifier != nil:
		return &subscriber{poller: poller{once{a}, pacer{retry: retry}}}
	}
	return &poller{once{a}, pacer{retry: retry}}
}

// A verdict is what settle makes of an attempt's outcome.
type verdict int

const (
	granted     verdict = iota // the grant is the caller's, revived if it came late
	late                       // the grant came too late to be of use and has expired
	held                       // the key is held (driver.ErrHeld)
	invalid                    // the backend refused the request (driver.ErrInvalid)
	unknown                    // the attempt failed: it may have been applied
	unreachable                // as unknown, with the backend unreachable (driver.ErrUnavailable)
	ctxEnded                   // ctx ended first: the attempt goes on in the background
)

// failure sorts the error of a failed attempt.
func failure(err error) verdict {
	switch {
	case errors.Is(err, driver.ErrHeld):
		return held
	case errors.Is(err, driver.ErrInvalid):
		return invalid
	case errors.Is(err, driver.ErrUnavailable):
		return unreachable
	}
	return unknown
}

// An attempt is what every waiter holds: the call's Locker, op, context
// (the call's, see enter) and lease.
type attempt struct {
	lk  *Locker
	op  string
	ctx context.Context
	dl  *driver.Lease
}

func (a *attempt) stop() {}

func (a *attempt) retarget(dl *driver.Lease) { a.dl = dl }

// settle sorts the outcome of an attempt at a.dl that returned err (its
// granting request sent at start), and starts, in the background, the
// clean-up the outcome calls for. queued: the attempt waited in the
// driver's queue; abandoned: the caller gave up on it at its context's
// end, and within calls settle when the attempt returns. The rules:
//
//   - a grant is revived (see revive) before it is the caller's, or
//     released by owner when no one waits for it any more;
//   - a queued wait that ends without a grant leaves the queue;
//   - a single attempt whose outcome is unknown, its own or its revival's,
//     is released by owner, so that a grant whose reply was lost is not
//     left behind (revive releases a grant it could not revive).
func (a *attempt) settle(queued, abandoned bool, start time.Time, err error) (verdict, time.Time, error) {
	switch {
	case err == nil && abandoned:
		a.lk.releaseLater(a.dl, time.Now().Add(a.dl.TTL))
		return granted, start, nil
	case err == nil:
		start, err = a.lk.revive(a.ctx, a.dl, start, false)
		if err == nil {
			return granted, start, nil
		}
		if errors.Is(err, driver.ErrNotHeld) {
			// A hand-over that reached a waiter after its validity.
			return late, start, err
		}
	case queued:
		a.lk.leaveAfter(err, a.dl)
	}
	v := failure(err)
	if (v == unknown || v == unreachable) && !queued {
		a.lk.releaseAfter(err, a.dl, time.Now().Add(a.dl.TTL))
	}
	return v, start, err
}

// once makes a single Acquire, and does not wait: the Try calls' waiter,
// and the attempts of poller and subscriber.
type once struct{ attempt }

func (w *once) try() (verdict, time.Time, error) {
	start := time.Now()
	ok, err := w.lk.withinJob(w.ctx, w)
	if !ok {
		return ctxEnded, start, err
	}
	return w.settle(false, false, start, err)
}

func (w *once) run() error { return w.lk.d.Acquire(w.ctx, w.dl) }

func (w *once) after(err error) { w.settle(false, true, time.Time{}, err) }

func (w *once) next(v verdict, err error) error {
	if v == late {
		return newError(w.op, w.dl.Key, ErrNotAcquired, err)
	}
	return newError(w.op, w.dl.Key, ErrNotAcquired, heldError{err})
}

// poller makes single Acquires, paced by the retry strategy.
type poller struct {
	once
	pacer
}

func (w *poller) next(v verdict, err error) error {
	if v == late {
		return nil
	}
	return w.pause(&w.attempt, err)
}

// subscriber is a poller that the driver's release news also wake: after
// the first attempt that finds the key held, it subscribes (a Notifier's
// Subscribe) and attempts once more at once, so that a release between
// that attempt and the subscription is not missed. A subscription that
// fails leaves it polling.
type subscriber struct {
	poller
	subscribed bool // Subscribe was called
	unsub      func()
}

func (w *subscriber) next(v verdict, err error) error {
	if v == held && !w.subscribed {
		w.subscribed = true
		c, unsub, serr := w.lk.notifier.Subscribe(w.ctx, w.dl.Key)
		if serr == nil {
			w.notify, w.unsub = c, unsub
			return nil
		}
		if w.ctx.Err() != nil {
			return ctxError(w.op, w.dl.Key, ErrNotAcquired, w.ctx)
		}
		w.lk.logWarn("subscribe failed; polling instead", w.dl.Key, serr)
	}
	return w.poller.next(v, err)
}

func (w *subscriber) stop() {
	if w.unsub != nil {
		w.unsub()
	}
}

// queueWaiter waits in the driver's queue (driver.Queuer): each attempt
// is a whole wait, made of steps on one goroutine (withinJob), so that a
// hand-off costs no goroutine of its own. An attempt that the queue does
// not grant (a plain driver.ErrHeld) is paced by the retry strategy.
type queueWaiter struct {
	attempt
	pacer
	grantStart time.Time // when the granting step started: written by run
}

func (w *queueWaiter) try() (verdict, time.Time, error) {
	ok, err := w.lk.withinJob(w.ctx, w)
	if !ok {
		return ctxEnded, time.Time{}, err
	}
	return w.settle(true, false, w.grantStart, err)
}

func (w *queueWaiter) run() error {
	var err error
	w.grantStart, err = w.lk.steps(w.ctx, w.dl)
	return err
}

func (w *queueWaiter) after(err error) { w.settle(true, true, time.Time{}, err) }

func (w *queueWaiter) next(v verdict, err error) error {
	if v == late {
		return nil
	}
	return w.pause(&w.attempt, err)
}

// steps makes the steps of a wait: Join, then a Check whenever the driver
// signals news, the holder's grant is due to expire, or a Heartbeat has
// passed, until a step grants dl or fails, or ctx ends. It returns when
// the last step started, and its error (ctx's when ctx ended).
func (lk *Locker) steps(ctx context.Context, dl *driver.Lease) (time.Time, error) {
	wake := make(chan struct{}, 1)
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for joined := false; ; joined = true {
		start := time.Now()
		var err error
		if joined {
			err = lk.queuer.Check(ctx, dl)
		} else {
			err = lk.queuer.Join(ctx, dl, wake)
		}
		if err == nil {
			return start, nil
		}
		held := asHeld(err)
		if held == nil {
			return start, err
		}
		next := driver.Heartbeat
		if r := held.RetryAfter; r > 0 && r < next {
			next = r
		}
		if t == nil {
			t = time.NewTimer(next)
		} else {
			t.Reset(next)
		}
		select {
		case <-ctx.Done():
			return start, ctx.Err()
		case <-wake:
		case <-t.C:
		}
	}
}

// asHeld returns the *driver.HeldError in err's chain, or nil. (Its
// own function: errors.As moves its target to the heap, which a wait's
// loop would pay for each step, a grant's included.)
func asHeld(err error) *driver.HeldError {
	var held *driver.HeldError
	if errors.As(err, &held) {
		return held
	}
	return nil
}

// pacer spaces a waiter's attempts on a held key: by the retry strategy's
// backoff (made at the first wait), sooner when the holder's grant is due
// to expire (driver.HeldError.RetryAfter) or release news comes (notify,
// once subscribed).
type pacer struct {
	retry   RetryStrategy
	backoff Backoff
	notify  <-chan struct{}
	outage  time.Duration // the bound of the next outageWait
}

// Waits between attempts at an unreachable backend are drawn from
// [b/2, b), b doubling from outageBase to outageMax: each failed attempt
// leaves a clean-up in the background, and a backend coming back up
// should not meet every waiter at once.
const outageBase, outageMax = 100 * time.Millisecond, 2 * time.Second

// outageWait is the least wait after an attempt that found the backend
// unreachable.
func (p *pacer) outageWait() time.Duration {
	b := max(p.outage, outageBase)
	p.outage = min(2*b, outageMax)
	return b/2 + rand.N(b/2)
}

// pause waits before the attempt after a's last, which found the key held
// with err; it fails when the backoff gives up or a's context ends.
func (p *pacer) pause(a *attempt, err error) error {
	if p.backoff == nil {
		if p.backoff = p.retry.NewBackoff(); p.backoff == nil {
			return newError(a.op, a.dl.Key, ErrInvalid, errors.New("the RetryStrategy's NewBackoff returned nil"))
		}
	}
	d, ok := p.backoff.Next()
	if !ok {
		return newError(a.op, a.dl.Key, ErrNotAcquired, notAcquiredCause(err))
	}
	if errors.Is(err, driver.ErrUnavailable) {
		d = max(d, p.outageWait())
	}
	var held *driver.HeldError
	if errors.As(err, &held) && held.RetryAfter > 0 && held.RetryAfter < d {
		d = held.RetryAfter
	}
	t := time.NewTimer(d)
	select {
	case <-a.ctx.Done():
		t.Stop()
		return ctxError(a.op, a.dl.Key, ErrNotAcquired, a.ctx)
	case <-p.notify:
		t.Stop()
	case <-t.C:
	}
	return nil
}
