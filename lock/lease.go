package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// A Lease is a granted lock on one key. It is safe for concurrent use.
//
// A lease is held until Unlock, until the Locker is closed, or until it is
// lost; then Done is closed and Err says why. Work guarded by the lease
// should watch Done and stop when it closes, and pass Token to the guarded
// resource so that the resource itself can refuse a holder that was too slow
// to notice (see Token).
type Lease struct {
	lk        *locker
	dl        *driver.Lease
	done      chan struct{}
	autoRenew bool

	mu        sync.Mutex
	err       error // set when done is closed
	unlocking bool
	ttl       time.Duration // current TTL: the grant's, then the last Refresh's
	start     time.Time     // when the last successful grant or refresh was sent
	deadline  time.Time     // start + validity - drift margin

	// Scheduler state, guarded by the scheduler's mutex.
	idx          int           // position in the scheduler's heap, -1 when absent
	due          time.Time     // when the scheduler next looks at the lease
	renewDue     bool          // due is a renewal time, not the deadline
	renewing     bool          // a refresh is under way
	retryAt      time.Time     // after a failed refresh: when to try again
	deadlineCopy time.Time     // deadline as of the last schedule
	ttlCopy      time.Duration // ttl as of the last schedule
}

// Key returns the key the lease is on.
func (l *Lease) Key() string { return l.dl.Key }

// Token returns the fencing token: it is strictly greater than the token of
// every earlier grant of this key on this backend, including grants made
// before the backend lost its state (the counter is then seeded from the
// backend's clock). Pass it along with every write to the guarded resource,
// and have the resource refuse writes with a smaller token than one it has
// seen: that turns a holder that paused past its lease into a refused write
// instead of a corrupted one.
func (l *Lease) Token() uint64 { return l.dl.Token }

// Done returns a channel that is closed when the lease ends: released by
// Unlock, released by Locker.Close, or lost. It is closed no later than the
// local deadline (see Deadline), so a holder that watches it stops before
// another client can be granted the key.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held. After Done is closed it returns
// an error wrapping ErrLost if the lease was lost (with the cause), ErrNotHeld
// if it was released by Unlock, or ErrClosed if released by Locker.Close.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Deadline returns the conservative local validity deadline: the time the
// last successful grant or refresh request was sent, plus the validity the
// backend applied, minus a drift margin of 1% of that validity plus 2 ms.
// Until then no other client can be granted the key, as judged by this
// process's monotonic clock. Done closes at the latest at this deadline
// unless a refresh succeeds first.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// TTL returns the lease time of the last grant or refresh.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Refresh extends the lease to ttl from now and moves its deadline. It
// returns an error wrapping ErrNotHeld if the grant is gone (the lease is
// then lost: Done closes), ErrClosed after the Locker was closed, or one
// wrapping the backend's or the context's error (the lease and its deadline
// are then unchanged). Auto-renewed leases rarely need it; it also changes
// the TTL that later renewals use. Close waits for a Refresh under way.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if !l.lk.begin() { // Close waits for it; no driver call after Close
		return newError("refresh", l.dl.Key, ErrClosed, nil)
	}
	defer l.lk.calls.Done()
	if err := checkTTL(ttl); err != nil {
		return newError("refresh", l.dl.Key, ErrInvalid, err)
	}
	probe := *l.dl
	probe.TTL = ttl
	if err := l.lk.d.Validate(&probe); err != nil {
		return driverError("refresh", l.dl.Key, err, ErrInvalid)
	}
	if err := l.Err(); err != nil {
		return newError("refresh", l.dl.Key, ErrNotHeld, err)
	}
	start := time.Now()
	validity, err := l.lk.d.Refresh(ctx, l.dl, ttl)
	return l.refreshed(ctx, "refresh", ttl, start, validity, err)
}

// refreshed applies the outcome of a refresh sent at start.
func (l *Lease) refreshed(ctx context.Context, op string, ttl time.Duration, start time.Time, validity time.Duration, err error) error {
	switch {
	case err == nil:
		l.mu.Lock()
		if l.err == nil && start.After(l.start) {
			l.start = start
			l.ttl = ttl
			l.deadline = start.Add(validity - driftMargin(validity))
		}
		l.mu.Unlock()
		l.lk.sched.schedule(l)
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		l.mu.Lock()
		unlocking := l.unlocking
		l.mu.Unlock()
		// A refresh that lands after a concurrent Unlock's release finds
		// the grant gone; Unlock, not the refresh, says how the lease ended.
		if !unlocking {
			l.lose(fmt.Errorf("%s: the backend no longer has the grant: %w", op, err), false)
		}
		return newError(op, l.dl.Key, ErrNotHeld, err)
	case ctx.Err() != nil:
		return ctxError(op, l.dl.Key, nil, ctx)
	default:
		return newError(op, l.dl.Key, nil, err)
	}
}

// Unlock releases the lease: the key is deleted on the backend only if this
// lease still owns it. It returns nil on success, an error wrapping
// ErrNotHeld if the grant was already gone (expired, lost, or released
// before), or ErrClosed after the Locker was closed.
//
// If the backend fails (network, server) or ctx ends, Unlock returns an
// error wrapping that cause (not ErrNotHeld: the grant may still exist), and
// the lease stays registered without renewal: call Unlock again, or let
// Close release it. Done then closes at the deadline at the latest, and a
// backend with TTLs frees the key by itself.
func (l *Lease) Unlock(ctx context.Context) error {
	if !l.lk.begin() { // Close waits for it; no driver call after Close
		return newError("unlock", l.dl.Key, ErrClosed, nil)
	}
	defer l.lk.calls.Done()
	return l.release(ctx, "unlock", newError("unlock", l.dl.Key, ErrNotHeld, errors.New("lease released")))
}

// release deletes the grant and ends the lease with reason.
func (l *Lease) release(ctx context.Context, op string, reason error) error {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		if errors.Is(err, ErrClosed) {
			return newError(op, l.dl.Key, ErrClosed, nil)
		}
		return newError(op, l.dl.Key, ErrNotHeld, err)
	}
	l.unlocking = true
	l.mu.Unlock()
	l.lk.sched.schedule(l) // renews no more; still ends the lease at its deadline

	err := l.lk.d.Release(ctx, l.dl)
	switch {
	case err == nil:
		l.finish(reason)
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		l.finish(newError(op, l.dl.Key, ErrLost, err))
		return newError(op, l.dl.Key, ErrNotHeld, err)
	case ctx.Err() != nil:
		return ctxError(op, l.dl.Key, nil, ctx)
	default:
		return newError(op, l.dl.Key, nil, err)
	}
}

// finish ends the lease with err (nil-safe against a second call) and
// reports whether this call ended it.
func (l *Lease) finish(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	close(l.done)
	l.mu.Unlock()
	l.lk.forget(l)
	return true
}

// lose ends the lease as lost. When the backend may still hold the grant
// (a local deadline passed, a driver reported a session problem), release
// it in the background so that it does not outlive the lease.
func (l *Lease) lose(cause error, releaseBackend bool) {
	if !l.finish(newError("renew", l.dl.Key, ErrLost, cause)) {
		return
	}
	if l.lk.opts.Logger != nil {
		l.lk.opts.Logger.Warn("dlock: lease lost", "key", l.dl.Key, "token", l.dl.Token, "err", cause)
	}
	if releaseBackend {
		l.lk.sched.releaseInBackground(l.dl)
	}
}

// lostByDriver is driver.Lease.Lost.
func (l *Lease) lostByDriver(cause error) {
	if cause == nil {
		cause = errors.New("reported by the driver")
	}
	l.lose(cause, true)
}
