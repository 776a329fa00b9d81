package lock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/google/uuid"
)

// A Locker grants leases on keys of one backend. It is safe for concurrent
// use. Drivers' constructors return one (redisnx.New, memcached.New, ...),
// and so does Open for a URL.
type Locker interface {
	// Lock blocks until key is granted, the retry strategy gives up, or ctx
	// ends. Errors wrap ErrNotAcquired (and ctx.Err() when ctx ended, or
	// the backend's error), ErrInvalid, or ErrClosed.
	Lock(ctx context.Context, key string, opts ...Option) (*Lease, error)
	// TryLock makes one attempt. A held key gives an error wrapping
	// ErrNotAcquired and ErrHeld; a backend failure, one wrapping
	// ErrNotAcquired and the backend's error.
	TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error)
	// Close releases every lease still held through this Locker, stops its
	// background work, makes waiting Lock calls return ErrClosed, and closes
	// the backend client if the Locker opened it (Open does; New does not).
	// Later calls return errors wrapping ErrClosed.
	Close() error
}

// RWLocker is a Locker that also grants shared (read) leases: any number of
// shared leases on a key coexist; an exclusive lease (Lock, TryLock)
// excludes them all. A writer that waits is not starved by readers that
// arrive after it. Find out with a type assertion:
//
//	if rw, ok := locker.(lock.RWLocker); ok { lease, err := rw.RLock(ctx, key) }
type RWLocker interface {
	Locker
	// RLock blocks until a shared lease on key is granted; errors as Lock.
	RLock(ctx context.Context, key string, opts ...Option) (*Lease, error)
	// TryRLock makes one attempt at a shared lease; errors as TryLock.
	TryRLock(ctx context.Context, key string, opts ...Option) (*Lease, error)
}

// New returns a Locker over a driver. It is for driver packages, whose own
// New functions call it; users call those (or Open). It returns an RWLocker
// when d implements driver.Sharer.
//
// Invalid options are reported by the Locker's first call, wrapped in
// ErrInvalid, so that constructors need not return errors.
func New(d driver.Driver, o *Options) Locker {
	opts, err := o.resolved()
	ctx, cancel := context.WithCancelCause(context.Background())
	lk := &locker{d: d, opts: opts, optsErr: err, ctx: ctx, cancel: cancel, leases: map[*Lease]struct{}{}}
	lk.notifier, _ = d.(driver.Notifier)
	lk.queuer, _ = d.(driver.Queuer)
	lk.sched = newScheduler(lk)
	if s, ok := d.(driver.Sharer); ok && s.SupportsShared() {
		return &rwLocker{lk}
	}
	return lk
}

type locker struct {
	d        driver.Driver
	notifier driver.Notifier
	queuer   driver.Queuer
	opts     Options
	optsErr  error
	sched    *scheduler

	ctx    context.Context // cancelled with ErrClosed by Close
	cancel context.CancelCauseFunc
	calls  sync.WaitGroup // Lock/TryLock calls under way, and background releases

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}
}

type rwLocker struct{ *locker }

func (lk *locker) Lock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "lock", key, driver.Exclusive, true, opts)
}

func (lk *locker) TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "trylock", key, driver.Exclusive, false, opts)
}

func (rw *rwLocker) RLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return rw.acquire(ctx, "rlock", key, driver.Shared, true, opts)
}

func (rw *rwLocker) TryRLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return rw.acquire(ctx, "tryrlock", key, driver.Shared, false, opts)
}

// begin registers a call under way, or fails when the Locker is closed.
func (lk *locker) begin() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.closed {
		return false
	}
	lk.calls.Add(1)
	return true
}

func newOwner() string {
	u := uuid.New()
	return hex.EncodeToString(u[:])
}

func (lk *locker) acquire(ctx context.Context, op, key string, mode driver.Mode, wait bool, opts []Option) (*Lease, error) {
	if lk.optsErr != nil {
		return nil, newError(op, key, ErrInvalid, lk.optsErr)
	}
	if err := checkKey(key); err != nil {
		return nil, newError(op, key, ErrInvalid, err)
	}
	co, err := lk.callOptions(opts)
	if err != nil {
		return nil, newError(op, key, ErrInvalid, err)
	}
	dl := &driver.Lease{Key: key, Owner: newOwner(), Mode: mode, TTL: co.ttl}
	if err := lk.d.Validate(dl); err != nil {
		return nil, driverError(op, key, err, ErrInvalid)
	}
	if !lk.begin() {
		return nil, newError(op, key, ErrClosed, nil)
	}
	defer lk.calls.Done()

	// Close cancels lk.ctx; make it end this call too, with ErrClosed.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(lk.ctx, func() { cancel(ErrClosed) })
	defer stop()

	l := &Lease{lk: lk, dl: dl, autoRenew: co.autoRenew, ttl: co.ttl, done: make(chan struct{}), idx: -1}
	dl.Lost = l.lostByDriver

	var (
		backoff   Backoff
		notify    <-chan struct{}
		queue     = wait && lk.queuer != nil && !co.retrySet
		subscribe = wait && lk.notifier != nil && !queue
	)
	for {
		start := time.Now()
		if queue {
			err = lk.queuer.AcquireWait(ctx, dl)
		} else {
			err = lk.d.Acquire(ctx, dl)
		}
		if err == nil {
			return l, lk.register(op, l, start)
		}
		if !errors.Is(err, driver.ErrHeld) {
			if errors.Is(err, driver.ErrInvalid) {
				return nil, newError(op, key, ErrInvalid, err)
			}
			// The outcome is unknown: the grant may have been applied and
			// its reply lost. Remove it by owner so nothing is left behind.
			if !queue {
				lk.cleanup(dl)
			}
			if ctx.Err() != nil {
				return nil, ctxError(op, key, ErrNotAcquired, ctx)
			}
			return nil, newError(op, key, ErrNotAcquired, err)
		}
		if !wait {
			return nil, newError(op, key, ErrNotAcquired, heldError{err})
		}
		if subscribe {
			// Subscribe, then try once more at once: a release between the
			// failed attempt and the subscription is not missed.
			subscribe = false
			c, unsub, serr := lk.notifier.Subscribe(ctx, key)
			if serr == nil {
				notify = c
				defer unsub()
				continue
			}
			if ctx.Err() != nil {
				return nil, ctxError(op, key, ErrNotAcquired, ctx)
			}
			lk.logWarn("subscribe failed; polling instead", key, serr)
		}
		if backoff == nil {
			backoff = co.retry.NewBackoff()
		}
		d, ok := backoff.Next()
		if !ok {
			return nil, newError(op, key, ErrNotAcquired, heldError{err})
		}
		var held *driver.HeldError
		if errors.As(err, &held) && held.RetryAfter > 0 && held.RetryAfter < d {
			d = held.RetryAfter
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctxError(op, key, ErrNotAcquired, ctx)
		case <-notify:
			t.Stop()
		case <-t.C:
		}
	}
}

// register makes a granted lease live: local deadline, renewal, and the
// Locker's list for Close. A grant that raced with Close is released.
func (lk *locker) register(op string, l *Lease, start time.Time) error {
	l.start = start
	l.deadline = start.Add(l.dl.Validity - driftMargin(l.dl.Validity))
	lk.mu.Lock()
	closed := lk.closed
	if !closed {
		lk.leases[l] = struct{}{}
	}
	lk.mu.Unlock()
	if closed {
		lk.cleanup(l.dl)
		l.finish(newError(op, l.dl.Key, ErrClosed, nil))
		return newError(op, l.dl.Key, ErrClosed, nil)
	}
	lk.sched.schedule(l)
	return nil
}

// cleanup releases dl by owner with a fresh context, for grants whose
// outcome is unknown or that no one holds any more. It waits at most a
// second; a slower release goes on in the background, bounded by
// ReleaseTimeout, and Close waits for it.
func (lk *locker) cleanup(dl *driver.Lease) {
	done := make(chan struct{})
	lk.calls.Add(1)
	go func() {
		defer lk.calls.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), lk.opts.ReleaseTimeout)
		defer cancel()
		if err := lk.d.Release(ctx, dl); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			lk.logWarn("clean-up release failed; the key is freed by its TTL", dl.Key, err)
		}
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (lk *locker) forget(l *Lease) {
	lk.mu.Lock()
	delete(lk.leases, l)
	lk.mu.Unlock()
	lk.sched.remove(l)
}

func (lk *locker) Close() error {
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		return newError("close", "", ErrClosed, nil)
	}
	lk.closed = true
	lk.mu.Unlock()
	lk.cancel(ErrClosed)
	lk.calls.Wait() // waiting calls return; grants racing with Close are released

	lk.mu.Lock()
	held := make([]*Lease, 0, len(lk.leases))
	for l := range lk.leases {
		held = append(held, l)
	}
	lk.mu.Unlock()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, 16)
	for _, l := range held {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), lk.opts.ReleaseTimeout)
			defer cancel()
			if err := l.release(ctx, "close", newError("close", l.dl.Key, ErrClosed, nil)); err != nil && !errors.Is(err, ErrNotHeld) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	lk.sched.stop()
	lk.calls.Wait() // background releases started by lost leases
	if err := lk.d.Close(); err != nil {
		errs = append(errs, fmt.Errorf("lock: closing driver: %w", err))
	}
	return errors.Join(errs...)
}

func (lk *locker) logWarn(msg, key string, err error) {
	if lk.opts.Logger != nil {
		lk.opts.Logger.Warn("dlock: "+msg, "key", key, "err", err)
	}
}

// As gives access to what a driver is built on, such as its backend client,
// for what this package does not offer. It sets target, a pointer, and
// reports whether it did; each driver's package doc lists the types it
// accepts under "As".
func As(l Locker, target any) bool {
	a, ok := l.(interface{ As(any) bool })
	return ok && a.As(target)
}

// As forwards to the driver's As method, if it has one.
func (lk *locker) As(target any) bool {
	a, ok := lk.d.(interface{ As(any) bool })
	return ok && a.As(target)
}
