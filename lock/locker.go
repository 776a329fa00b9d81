package lock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
)

// MaxPermits is the largest limit of a semaphore (Acquire).
const MaxPermits = 1 << 16

// New returns a Locker over a driver. It is for driver packages, whose own
// New functions call it; users call those (or Open).
//
// Invalid options (and a nil d) are reported by every call of the Locker,
// wrapped in ErrInvalid, so that constructors need not return errors.
//
// New asks the driver once what it can do (driver.Capable): the Locker's
// methods for what it cannot refuse with ErrUnsupported and the driver's
// reason, and Supports tells without trying. The driver's name, for the
// dlock.driver attribute of metrics, the driver attribute of logs and the
// refusals, is the one its Caps give, or else its type's package name.
// New makes the Locker's instruments (see "Metrics and logs"), and hands
// Options.Logger to a driver that implements driver.LogSetter.
func New(d driver.Driver, o *Options) *Locker {
	opts, err := o.resolved()
	if d == nil {
		err = fmt.Errorf("%w: nil driver.Driver", ErrInvalid)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	lk := &Locker{d: d, caps: capsOf(d), opts: opts, optsErr: err, ctx: ctx, cancel: cancel, leases: map[*Lease]struct{}{}, scopes: map[uint64]context.CancelCauseFunc{}, work: make(chan *call)}
	lk.name = lk.caps.Name
	var merr error
	if lk.m, merr = newMetrics(opts.MeterProvider, lk.name, opts.MetricKeys); merr != nil && opts.Logger != nil {
		opts.Logger.Warn("dlock: some instruments could not be made and are not recorded", "driver", lk.name, "err", merr)
	}
	if ls, ok := d.(driver.LogSetter); ok {
		ls.SetLogger(opts.Logger)
	}
	lk.bgCtx, lk.bgCancel = context.WithCancel(context.Background())
	lk.notifier, _ = d.(driver.Notifier)
	lk.queuer, _ = d.(driver.Queuer)
	lk.prompt = lk.caps.ReturnsAtContextEnd
	lk.sched = newScheduler(lk)
	return lk
}

// A Locker grants leases on keys of one backend. It is safe for concurrent
// use. Drivers' constructors return one (redisnx.New, memcached.New, ...),
// and so does Open for a URL.
//
// Every Locker has every method. A method that needs what the backend
// cannot do (shared leases, semaphore permits, re-entry, Resume, Inspect)
// fails with an error wrapping ErrUnsupported that names the driver and
// says why; Supports tells without trying. A nil *Locker's methods fail
// with ErrInvalid.
type Locker struct {
	d        driver.Driver
	caps     driver.Caps // what the driver said it does, Name filled
	name     string      // the driver's name, for metrics and logs
	m        *metrics    // nil without Options.MeterProvider
	notifier driver.Notifier
	prompt   bool // the driver's calls return by their context's end (Caps.ReturnsAtContextEnd)
	queuer   driver.Queuer
	opts     Options
	optsErr  error
	sched    *scheduler

	ctx    context.Context // cancelled with ErrClosed by Close
	cancel context.CancelCauseFunc
	calls  group // Lock, TryLock, Refresh and Unlock calls under way

	// Background releases (releaseLater): bgCtx is cancelled when Close's
	// bound has passed.
	bg       group
	bgCtx    context.Context
	bgCancel context.CancelFunc

	// Goroutines that run driver calls for within, kept between calls
	// (see worker): idle ones receive on work.
	work        chan *call
	workers     group
	idleWorkers atomic.Int32

	// afterResume, when set (by tests), runs in Resume between the
	// driver's Resume and register.
	afterResume func()

	mu     sync.Mutex
	closed bool
	stopBy time.Time // Close's bound, once Close began
	leases map[*Lease]struct{}
	// scopes are the cancels of the contexts of calls under way (enter),
	// which Close cancels with ErrClosed; by a sequence number.
	scopes   map[uint64]context.CancelCauseFunc
	scopeSeq uint64
}

// Lock blocks until key is granted, the retry strategy gives up, or ctx
// ends. Errors wrap ErrNotAcquired (and ctx.Err() when ctx ended, or the
// backend's error), ErrInvalid, ErrUnsupported (WithOwner where the
// backend keeps no holds) or ErrClosed.
func (lk *Locker) Lock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "lock", key, driver.Exclusive, 0, true, opts)
}

// TryLock makes one attempt. A held key gives an error wrapping
// ErrNotAcquired and ErrHeld; a backend failure, one wrapping
// ErrNotAcquired and the backend's error.
func (lk *Locker) TryLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "trylock", key, driver.Exclusive, 0, false, opts)
}

// RLock blocks until a shared (read) lease on key is granted; errors as
// Lock. Any number of shared leases on a key coexist; an exclusive lease
// (Lock, TryLock) excludes them all. A writer that waits is not starved by
// readers that arrive after it. A backend without shared leases refuses
// with ErrUnsupported (Supports(SharedLeases) tells).
func (lk *Locker) RLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "rlock", key, driver.Shared, 0, true, opts)
}

// TryRLock makes one attempt at a shared lease; errors as TryLock and
// RLock.
func (lk *Locker) TryRLock(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "tryrlock", key, driver.Shared, 0, false, opts)
}

// Acquire blocks until one of the limit permits of key's counting
// semaphore is granted, the retry strategy gives up, or ctx ends; errors
// as Lock. limit is from 1 to MaxPermits. A backend without semaphores
// refuses with ErrUnsupported (Supports(Permits) tells).
//
// A permit is a Lease like any other: a fencing token from the key's one
// counter (so tokens increase across all grants of the key), Done and Err,
// Deadline, Refresh, Unlock, automatic renewal, Handle and Resume where the
// driver resumes leases. A permit expires on its own: a crashed holder's
// returns within its TTL (ZooKeeper: its session timeout). While any permit
// of a key is held, Lock and RLock of the key wait like for any holder.
//
// The methods are named Acquire, not Lock, because limit is the size of
// the semaphore, not a weight: each call takes one permit of limit (unlike
// golang.org/x/sync/semaphore's Acquire(ctx, n), whose n is what is
// taken). Every holder of a key's permits must give the same limit; a call
// whose limit differs from the one the key's live permits were granted with
// fails with ErrInvalid and changes nothing. Waiting is first come, first
// served on drivers that queue (a waiter is not passed by later arrivals),
// and by the retry strategy elsewhere.
func (lk *Locker) Acquire(ctx context.Context, key string, limit int, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "acquire", key, driver.Permit, limit, true, opts)
}

// TryAcquire makes one attempt at a permit; errors as TryLock and Acquire.
func (lk *Locker) TryAcquire(ctx context.Context, key string, limit int, opts ...Option) (*Lease, error) {
	return lk.acquire(ctx, "tryacquire", key, driver.Permit, limit, false, opts)
}

// begin registers a call under way, or fails when the Locker is closed.
func (lk *Locker) begin() bool { return lk.calls.add() }

// The prologue of the calls that start on a key (acquisitions, Resume,
// Inspect): checkCall, options, then enter once the call is ready to
// reach the backend.

// checkCall makes the checks every call makes first: the Locker's
// options, then its arguments (argErr: what checking them found wrong, as
// checkKey does), each reported with key as ErrInvalid.
func (lk *Locker) checkCall(op, key string, argErr error) error {
	if lk.optsErr != nil {
		return newError(op, key, ErrInvalid, lk.optsErr)
	}
	if argErr != nil {
		return newError(op, key, ErrInvalid, argErr)
	}
	return nil
}

// options returns the options of a call, the Locker's with opts applied
// (callOptions), or their error as ErrInvalid.
func (lk *Locker) options(op, key string, opts []Option) (callOptions, error) {
	co, err := lk.callOptions(opts)
	if err != nil {
		return co, newError(op, key, ErrInvalid, err)
	}
	return co, nil
}

// A scope is a call under way (enter): its context, and what exit ends.
type scope struct {
	ctx    context.Context
	lk     *Locker
	cancel context.CancelCauseFunc
	id     uint64 // its key in lk.scopes
}

// enter begins a call of op on key: it registers the call (begin), or
// fails with ErrClosed, and makes its context: parent's, also ended (with
// ErrClosed) when Close begins. The caller defers the scope's exit.
//
// The context's cancel is kept in lk.scopes, which Close cancels, rather
// than armed with context.AfterFunc on lk.ctx: three allocations fewer
// per call.
func (lk *Locker) enter(parent context.Context, op, key string) (scope, error) {
	if !lk.begin() {
		return scope{}, newError(op, key, ErrClosed, nil)
	}
	ctx, cancel := context.WithCancelCause(parent)
	lk.mu.Lock()
	closed := lk.closed
	lk.scopeSeq++
	id := lk.scopeSeq
	if !closed {
		lk.scopes[id] = cancel
	}
	lk.mu.Unlock()
	if closed {
		cancel(ErrClosed)
	}
	return scope{ctx: ctx, lk: lk, cancel: cancel, id: id}, nil
}

// exit ends the call that enter began.
func (s scope) exit() {
	s.lk.mu.Lock()
	delete(s.lk.scopes, s.id)
	s.lk.mu.Unlock()
	s.cancel(nil)
	s.lk.calls.done()
}

// newOwner returns a fresh owner token: 128 random bits in hex.
func newOwner() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24)
	return hex.EncodeToString(b[:])
}

// namedOwner returns an owner token for one attempt of the owner named
// id: the first driver.NamedOwnerLen hex digits of id's SHA-256, then 64
// random bits.
func namedOwner(id string) string {
	sum := sha256.Sum256([]byte("dlock owner\x00" + id))
	var b [16]byte
	copy(b[:8], sum[:8])
	rand.Read(b[8:])
	return hex.EncodeToString(b[:])
}

// checkLimit checks a semaphore's limit.
func checkLimit(limit int) error {
	if limit < 1 || limit > MaxPermits {
		return fmt.Errorf("semaphore limit %d out of range [1, %d]", limit, MaxPermits)
	}
	return nil
}

// newLease makes the Lease of an attempt at dl (the Lease and its
// driver.Lease in one allocation), checked by the driver: an error wraps
// ErrInvalid.
func (lk *Locker) newLease(op string, co callOptions, dl driver.Lease) (*Lease, error) {
	l := &Lease{lk: lk, autoRenew: co.autoRenew, ttl: co.ttl, idx: -1, own: dl}
	l.dl = &l.own
	if err := lk.d.Validate(l.dl); err != nil {
		return nil, driverError(op, dl.Key, err, ErrInvalid)
	}
	validity, err := validityFor(l.dl)
	if err != nil {
		return nil, newError(op, dl.Key, ErrInvalid, err)
	}
	l.validity, l.done, l.refreshing = validity, make(chan struct{}), make(chan struct{}, 1)
	l.dl.Lost = l.lostByDriver
	return l, nil
}

// revive checks a grant whose request was sent at start: if the validity
// it counts on (dl.Validity from start) has passed or leaves no room for a
// renewal by the time it arrives, as can happen to a grant that reached a
// queued waiter late, it refreshes the grant and returns the moment that
// refresh was sent, with dl.Validity set to what it gives. A refresh that
// finds the grant gone returns driver.ErrNotHeld; one whose outcome is
// unknown an error, and the grant is released in the background unless
// keep is set (a resumed grant, which stays its first holder's when the
// Resume fails).
func (lk *Locker) revive(ctx context.Context, dl *driver.Lease, start time.Time, keep bool) (time.Time, error) {
	v := dl.Validity
	if time.Until(start.Add(v-driftMargin(v))) >= minRenewRoom {
		return start, nil
	}
	sent := time.Now()
	var got time.Duration
	ok, err := lk.within(ctx, func() error {
		var err error
		got, err = lk.d.Refresh(ctx, dl, dl.TTL)
		return err
	}, func(err error) {
		if !keep && !errors.Is(err, driver.ErrNotHeld) {
			lk.releaseLater(dl, time.Now().Add(dl.TTL))
		}
	})
	switch {
	case !ok:
		return start, ctx.Err()
	case err == nil:
		if time.Until(sent.Add(got-driftMargin(got))) < minRenewRoom {
			err = fmt.Errorf("the refresh of a late grant came after the validity it gave had passed")
			break
		}
		dl.Validity = got
		return sent, nil
	case errors.Is(err, driver.ErrNotHeld):
		return start, err
	}
	if !keep {
		lk.releaseLater(dl, time.Now().Add(dl.TTL))
	}
	return start, err
}

// validityFor is the validity a grant or refresh of dl.TTL is sure to
// have, as the driver's Validate set it in dl.Validity (dl.TTL when it set
// none), or an error when that leaves no time to renew the lease in.
func validityFor(dl *driver.Lease) (time.Duration, error) {
	v := dl.Validity
	if v == 0 {
		v = dl.TTL
	}
	if room := v - driftMargin(v); room < minRenewRoom {
		return 0, fmt.Errorf("TTL %v gives a validity of %v on this backend, which leaves no room for a renewal", dl.TTL, errtext.Duration(v))
	}
	dl.Validity = 0
	return v, nil
}

// register makes a granted lease live: local deadline, renewal, and the
// Locker's list for Close. A grant that raced with Close is released,
// unless it was resumed (it stays its first holder's: a failed Resume
// changes nothing), and the call fails with ErrClosed.
func (lk *Locker) register(op string, l *Lease, start time.Time) error {
	l.start = start
	l.deadline = start.Add(l.dl.Validity - driftMargin(l.dl.Validity))
	lk.mu.Lock()
	closed := lk.closed
	if !closed {
		lk.leases[l] = struct{}{}
	}
	lk.mu.Unlock()
	if closed {
		l.finish(newError(op, l.dl.Key, ErrClosed, nil))
		if !l.resumed {
			lk.releaseLater(l.dl, l.expiry())
		}
		return newError(op, l.dl.Key, ErrClosed, nil)
	}
	lk.granted(op, l)
	lk.sched.schedule(l)
	return nil
}

// releaseLater releases dl by owner in the background, for grants whose
// outcome is unknown or that no one holds any more: it retries a failing
// release until it succeeds, the backend says the grant is gone, or until
// passes (the grant has expired by then). Close waits for it up to Close's
// bound and then cuts it short.
func (lk *Locker) releaseLater(dl *driver.Lease, until time.Time) {
	lk.releaseAfter(nil, dl, until)
}

// releaseAfter is releaseLater after an attempt that failed with cause
// (nil: no failed attempt), which decides how a failure is logged
// (logCleanup).
func (lk *Locker) releaseAfter(cause error, dl *driver.Lease, until time.Time) {
	if !lk.bg.add() {
		return // Close is past its bound: the TTL frees the key
	}
	go func() {
		defer lk.bg.done()
		if err := lk.retry(dl, until, lk.d.Release); err != nil {
			lk.releaseFailed(dl, true)
			msg := "background release failed; the key is freed by its TTL"
			if cause != nil {
				msg = "clean-up of an attempt whose outcome is unknown failed; if it was granted, its TTL frees the key"
			}
			lk.logCleanup(msg, dl.Key, err, cause)
		}
	}()
}

// leaveAfter ends a queued wait that did not get the key, in the
// background, as releaseLater ends a grant; cause is the error the wait
// ended with, which decides how a failure is logged (see releaseAfter).
func (lk *Locker) leaveAfter(cause error, dl *driver.Lease) {
	if !lk.bg.add() {
		return // Close is past its bound: the queue entry dies by itself
	}
	go func() {
		defer lk.bg.done()
		if err := lk.retry(dl, time.Now().Add(dl.TTL), lk.leave); err != nil {
			lk.logCleanup("leaving the queue failed; the entry dies by itself", dl.Key, err, cause)
		}
	}()
}

// leave is the Queuer's Leave, but that once Close has begun it fails
// without trying again: what it leaves behind dies with the queue entry,
// or with the TTL of a grant whose reply was lost, and Close does not wait
// for an unreachable backend longer than one attempt.
func (lk *Locker) leave(ctx context.Context, dl *driver.Lease) error {
	err := lk.queuer.Leave(ctx, dl)
	lk.mu.Lock()
	closing := !lk.stopBy.IsZero()
	lk.mu.Unlock()
	if err != nil && closing {
		return &finalError{fmt.Errorf("%w (not retried: the Locker is closing)", err)}
	}
	return err
}

// finalError is an attempt's failure that retry does not retry.
type finalError struct{ error }

func (e *finalError) Unwrap() error { return e.error }

// retry makes attempts of op (a release or a leave) for dl until one
// succeeds, the backend says the grant is gone, or until passes, or
// Close's bound. Each attempt is bounded by ReleaseTimeout.
func (lk *Locker) retry(dl *driver.Lease, until time.Time, op func(context.Context, *driver.Lease) error) error {
	const first, maxWait = 20 * time.Millisecond, time.Second
	wait := first
	for {
		lk.mu.Lock()
		stopBy := lk.stopBy
		lk.mu.Unlock()
		if !stopBy.IsZero() {
			until = earlier(until, stopBy)
		}
		ctx, cancel := context.WithDeadline(lk.bgCtx, earlier(until, time.Now().Add(lk.opts.ReleaseTimeout)))
		// Bounded by ctx even when the client is not (gomemcache's own
		// timeouts): Close's releases keep its bound.
		ok, err := lk.within(ctx, func() error { return op(ctx, dl) }, nil)
		if !ok {
			err = ctx.Err()
		}
		cancel()
		if err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrInvalid) {
			return nil
		}
		if f := (*finalError)(nil); errors.As(err, &f) {
			return err
		}
		if !time.Now().Add(wait).Before(until) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-lk.bgCtx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

func (lk *Locker) forget(l *Lease) {
	lk.mu.Lock()
	delete(lk.leases, l)
	lk.mu.Unlock()
	lk.sched.remove(l)
}

// Close ends every lease of the Locker at once (Done closes, Err reports
// ErrClosed), then releases their grants, retrying failed releases, for at
// most ReleaseTimeout in all; calls under way and background releases are
// waited for up to the same bound, then Close returns. Lock, TryLock,
// Resume and Inspect calls under way end with ErrClosed; an Unlock or
// Refresh under way ends with its own context (or, for Refresh, the
// lease's deadline), which Close does not cut short. A second Close
// returns nil.
func (lk *Locker) Close() error {
	if lk == nil {
		return newError("close", "", ErrInvalid, errNilLocker)
	}
	lk.mu.Lock()
	if lk.closed {
		lk.mu.Unlock()
		return nil
	}
	lk.closed = true
	bound := time.Now().Add(lk.opts.ReleaseTimeout)
	lk.stopBy = bound
	held := make([]*Lease, 0, len(lk.leases))
	for l := range lk.leases {
		held = append(held, l)
	}
	scopes := make([]context.CancelCauseFunc, 0, len(lk.scopes))
	for _, cancel := range lk.scopes {
		scopes = append(scopes, cancel)
	}
	lk.mu.Unlock()
	lk.calls.stop()
	lk.cancel(ErrClosed)
	for _, cancel := range scopes {
		cancel(ErrClosed) // waiting calls return
	}

	// End the leases first: from now on none is reported held, whatever
	// becomes of its release.
	type release struct {
		dl    *driver.Lease
		until time.Time
	}
	rs := make([]release, 0, len(held))
	for _, l := range held {
		until := l.expiry()
		if l.finish(newError("close", l.dl.Key, ErrClosed, nil)) {
			rs = append(rs, release{l.dl, until})
		}
	}
	var (
		mu   sync.Mutex
		errs []error
		next = make(chan release)
		wg   sync.WaitGroup
	)
	for range min(len(rs), 16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				if err := lk.retry(r.dl, r.until, lk.d.Release); err != nil {
					lk.releaseFailed(r.dl, true)
					mu.Lock()
					errs = append(errs, newError("close", r.dl.Key, nil, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, r := range rs {
		next <- r
	}
	close(next)
	wg.Wait()
	if err := lk.stopAll(bound); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopAll is the end of Close, after the leases' releases: it waits for
// calls and background releases up to bound, then cuts them short, stops
// the renewals and the workers, and closes the driver, waiting for that
// up to bound too (or 100ms, if bound has passed).
func (lk *Locker) stopAll(bound time.Time) error {
	timer := time.NewTimer(time.Until(bound))
	defer timer.Stop()
	for _, g := range []*group{&lk.calls, &lk.bg} {
		select {
		case <-g.idleChan():
		case <-timer.C:
			timer.Reset(0)
		}
	}
	lk.bg.stop()
	lk.bgCancel()
	lk.sched.stop()
	lk.workers.stop()
	// Closing the driver ends its calls under way, if cutting their
	// contexts did not. It may itself wait for the backend (a ZooKeeper
	// session's close): it goes on in the background after the wait.
	closed := make(chan error, 1)
	go func() {
		var err error
		if lk.d != nil {
			err = lk.d.Close()
		}
		<-lk.calls.idleChan()
		<-lk.bg.idleChan()
		<-lk.sched.workers.idleChan()
		<-lk.workers.idleChan()
		closed <- err
	}()
	timer.Reset(max(time.Until(bound), 100*time.Millisecond))
	select {
	case err := <-closed:
		if err != nil {
			return fmt.Errorf("lock: close: %w", err)
		}
		return nil
	case <-timer.C:
		return fmt.Errorf("lock: close: still under way after %v (ReleaseTimeout); it goes on in the background", lk.opts.ReleaseTimeout)
	}
}

func (lk *Locker) logWarn(msg, key string, err error) {
	if lk.opts.Logger != nil {
		lk.opts.Logger.Warn("dlock: "+msg, "key", key, "driver", lk.name, "err", err)
	}
}

// As gives access to what the driver is built on, such as its backend
// client, for what this package does not offer. It sets target, a
// pointer, and reports whether it did; each driver's package doc lists the
// types it accepts under "As".
func (lk *Locker) As(target any) bool {
	if lk == nil {
		return false
	}
	a, ok := lk.d.(driver.Aser)
	return ok && a.As(target)
}

// As is l.As(target).
//
// Deprecated: use Locker.As.
func As(l *Locker, target any) bool { return l.As(target) }
