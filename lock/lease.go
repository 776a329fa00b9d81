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
	lk        *Locker
	dl        *driver.Lease // &own
	own       driver.Lease
	done      chan struct{}
	autoRenew bool
	// resumed: the grant came from Locker.Resume, so another Lease (the
	// one whose handle was resumed) may hold it too: a Close that beat
	// this Lease's registration, or a failed refresh of a late Resume,
	// leaves it to the other Lease and the backend's expiry. (A lost
	// Lease's grant follows releasesLost, resumed or not.) Set before the
	// lease is registered.
	resumed bool
	// refreshing admits one refresh of this lease at a time (a renewal or
	// a Refresh): the backend then applies them in the order they were
	// sent, so the deadline of the last one to succeed is the right one.
	refreshing chan struct{}
	release    releaseJob // Unlock's driver call

	mu        sync.Mutex
	err       error // set when done is closed
	unlocking bool
	// registered is set once the lease is handed out (register): its end
	// is then recorded (ended).
	registered bool
	ttl        time.Duration // current TTL: the grant's, then the last Refresh's
	validity   time.Duration // what a refresh of ttl is sure to give (driver's Validate)
	start      time.Time     // when the last successful grant or refresh was sent
	deadline   time.Time     // start + applied - drift margin, or earlier (see beginRefresh)
	// applied is the validity the backend applied at the last successful
	// refresh, which deadline is counted with; zero until one succeeds,
	// the grant's being dl.Validity (see Validity).
	applied time.Duration
	// unknownV is the shortest validity of a refresh whose outcome is
	// unknown (its reply was lost): the backend may apply it after any
	// later refresh, so no deadline may count on more. Zero when none.
	unknownV time.Duration
	// grantedAt is when the lease was handed out (register), on the
	// monotonic clock since monoBase, when metrics are on.
	grantedAt time.Duration

	// Scheduler state, guarded by the scheduler's mutex.
	idx          int           // position in the scheduler's heap, -1 when absent
	due          time.Time     // when the scheduler next looks at the lease
	renewDue     bool          // due is a renewal time, not the deadline
	renewing     bool          // a renewal of the scheduler is under way
	retryAt      time.Time     // after a failed refresh: when to try again
	deadlineCopy time.Time     // deadline as of the last schedule
	ttlCopy      time.Duration // ttl as of the last schedule
	validCopy    time.Duration // validity as of the last schedule
}

// invalid reports whether l is nil or a zero Lease, not one a Locker
// granted. Its methods then change nothing: those that return an error
// return one wrapping ErrInvalid, the others zero values (Done a closed
// channel: a Lease that was never granted is not held).
func (l *Lease) invalid() bool { return l == nil || l.dl == nil }

// Key returns the key the lease is on.
func (l *Lease) Key() string {
	if l.invalid() {
		return ""
	}
	return l.dl.Key
}

// Token returns the fencing token: it is strictly greater than the token of
// every earlier grant of this key on this backend, including grants made
// before the backend lost its state (the counter is then seeded from the
// backend's clock). Pass it along with every write to the guarded resource,
// and have the resource refuse writes with a smaller token than one it has
// seen: that turns a holder that paused past its lease into a refused write
// instead of a corrupted one.
func (l *Lease) Token() uint64 {
	if l.invalid() {
		return 0
	}
	return l.dl.Token
}

// Limit returns, for a permit of a semaphore (Locker.Acquire), the semaphore's
// number of permits; zero for any other lease.
func (l *Lease) Limit() int {
	if l.invalid() {
		return 0
	}
	return l.dl.Limit
}

// Done returns a channel that is closed when the lease ends: released by
// Unlock, released by Locker.Close, or lost. It is closed no later than the
// local deadline (see Deadline), so a holder that watches it stops before
// another client can be granted the key.
func (l *Lease) Done() <-chan struct{} {
	if l.invalid() {
		return closedChan
	}
	return l.done
}

// Err returns nil while the lease is held. After Done is closed it returns
// an error wrapping ErrLost if the lease was lost (with the cause), ErrNotHeld
// if it was released by Unlock, or ErrClosed if released by Locker.Close.
// For a nil or zero Lease (never granted; Done is closed) it returns an
// error wrapping ErrInvalid.
func (l *Lease) Err() error {
	if l.invalid() {
		return newError("lease", "", ErrInvalid, errNoLease)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Deadline returns the conservative local validity deadline: the time the
// last successful grant or refresh request was sent, plus the validity the
// backend applied (Validity), minus driver.DriftMargin of that validity.
// Until then no other client can be granted the key, as judged
// by this process's monotonic clock. Done closes at the latest at this
// deadline unless a refresh succeeds first.
//
// A refresh moves the deadline earlier before it is sent when the backend
// may apply a shorter validity than the deadline counts on (a Refresh to a
// shorter TTL): its reply may be lost after the backend applied it. For the
// same reason, once a refresh's outcome is unknown, no later deadline counts
// on more than that refresh's validity.
func (l *Lease) Deadline() time.Time {
	if l.invalid() {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// TTL returns the lease time asked for at the grant (WithTTL, or the
// Locker's default) or by the last Refresh that succeeded: what renewals
// ask for. It is not how long the lease lasts: the backend may apply less
// (see Validity).
func (l *Lease) TTL() time.Duration {
	if l.invalid() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Validity returns how long the backend is sure to keep the grant after
// the last successful grant or refresh was sent: the validity it applied
// to the TTL, which Deadline is counted with. Without a renewal, the lease
// lasts that long less the drift margin (see Deadline), and no more.
//
// It is the TTL on Redis and the memory driver. It is shorter on memcached,
// which counts whole seconds on a clock that ticks once a second: a TTL of
// N s (rounded up) gives N-2 s. ZooKeeper ignores the TTL, shorter or
// longer: a grant lasts as long as its session, which the server may
// expire once it has not heard from it for the session timeout, so the
// validity is the timeout less the age of the last proof that the leader
// heard from the session when the grant or refresh was sent: at least
// half the timeout for a grant, which waits for such proof, and about 0.4
// to 0.7 of it for a refresh, the proof being kept fresh in the
// background. After a refresh whose outcome was unknown, it is no more
// than that refresh's validity (see Deadline).
func (l *Lease) Validity() time.Duration {
	if l.invalid() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.applied > 0 {
		return l.applied
	}
	return l.dl.Validity // the grant's, set before the Lease was handed out
}

// Refresh extends the lease to ttl from now and moves its deadline; it also
// changes the TTL that later renewals use. A ttl of 0 means the Locker's
// default (Options.TTL, else DefaultTTL), as with WithTTL(0). The backend never shortens the
// grant (another Lease of it, see Locker.Resume, may count on more), so a
// Refresh to a shorter TTL shortens only this lease's deadline. Auto-renewed
// leases rarely need it. It waits for a renewal of the same lease under way, so that the
// backend applies refreshes in the order they were sent.
//
// Refresh returns nil only if the lease is held when it returns: Done open
// and the new deadline ahead. Otherwise it returns an error wrapping
//   - ErrNotHeld if the grant is gone, or the lease ended before or while
//     the refresh was under way (with ErrLost too if it was lost; Done is
//     then closed);
//   - ErrClosed after the Locker was closed;
//   - the backend's or the context's error: the outcome is unknown and the
//     lease goes on, but its deadline is no later than the refresh would
//     have made it, since the backend may have applied it (see Deadline);
//   - ErrInvalid for a TTL out of range (a negative one included), a nil
//     ctx, or a nil or zero Lease:
//     nothing is changed.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	switch {
	case l.invalid():
		return newError("refresh", "", ErrInvalid, errNoLease)
	case ctx == nil:
		return newError("refresh", l.dl.Key, ErrInvalid, errNilContext)
	}
	if !l.lk.begin() { // Close waits for it; no driver call after Close
		return newError("refresh", l.dl.Key, ErrClosed, nil)
	}
	defer l.lk.calls.done()
	if ttl == 0 { // as WithTTL(0): the Locker's default
		ttl = l.lk.opts.TTL
	}
	if err := checkTTL(ttl); err != nil {
		return newError("refresh", l.dl.Key, ErrInvalid, err)
	}
	probe := *l.dl
	probe.TTL, probe.Validity = ttl, 0
	if err := l.lk.d.Validate(&probe); err != nil {
		return driverError("refresh", l.dl.Key, err, ErrInvalid)
	}
	v, err := validityFor(&probe)
	if err != nil {
		return newError("refresh", l.dl.Key, ErrInvalid, err)
	}
	select {
	case l.refreshing <- struct{}{}:
	case <-l.done:
		return l.endedError("refresh", l.Err())
	case <-ctx.Done():
		return ctxError("refresh", l.dl.Key, nil, ctx)
	}
	// The slot is freed when the refresh returns, even after Refresh gave
	// up waiting for it; renewals go on after that.
	free := func() {
		<-l.refreshing
		l.lk.sched.schedule(l)
	}
	start := time.Now()
	deadline, err := l.beginRefresh("refresh", start, v)
	if err != nil {
		free()
		return err
	}
	// No reply is of use past the deadline: the lease is lost by then.
	cctx, cancel := context.WithDeadline(ctx, deadline)
	var got time.Duration
	ok, err := l.lk.within(cctx, func() error {
		var err error
		got, err = l.lk.d.Refresh(cctx, l.dl, ttl)
		return err
	}, func(err error) {
		l.endRefresh(cctx, "refresh", ttl, v, start, got, err)
		cancel()
		free()
	})
	if !ok {
		// Gave up at the context's end (the caller's, or the lease's
		// deadline): the outcome is unknown until the refresh returns.
		if err := l.unknownOutcome("refresh", v); err != nil {
			return err
		}
		return ctxError("refresh", l.dl.Key, nil, cctx)
	}
	defer free()
	defer cancel()
	return l.endRefresh(cctx, "refresh", ttl, v, start, got, err)
}

// beginRefresh prepares a refresh to be sent at start that the backend
// will apply with validity v: the lease's deadline is moved to no later
// than what the refresh gives, since its reply may be lost after the
// backend applied it. It returns the deadline, or an error if the lease
// has ended.
func (l *Lease) beginRefresh(op string, start time.Time, v time.Duration) (time.Time, error) {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return time.Time{}, l.endedError(op, err)
	}
	moved := false
	if d := start.Add(v - driftMargin(v)); d.Before(l.deadline) {
		l.deadline, moved = d, true
	}
	deadline := l.deadline
	l.mu.Unlock()
	if moved {
		l.lk.sched.schedule(l)
	}
	return deadline, nil
}

// endRefresh applies the outcome of a refresh to ttl sent at start, which
// Validate said gives validity v, and which answered got and err.
func (l *Lease) endRefresh(ctx context.Context, op string, ttl, v time.Duration, start time.Time, got time.Duration, err error) error {
	switch {
	case err == nil:
		now := time.Now()
		l.mu.Lock()
		if l.err != nil {
			// The lease ended while the refresh was under way (lost at
			// its deadline, say): the grant the refresh found may be
			// about to expire, or another's by now. Do not report it held.
			ended := l.err
			l.mu.Unlock()
			return l.endedError(op, ended)
		}
		if l.unknownV > 0 {
			got = min(got, l.unknownV)
		}
		deadline := start.Add(got - driftMargin(got))
		if !now.Before(deadline) {
			l.mu.Unlock()
			cause := fmt.Errorf("%s: the reply came after the validity it gave had passed", op)
			l.lose(cause, lostExpired, true)
			return l.endedError(op, l.Err())
		}
		if start.After(l.start) {
			l.start, l.ttl, l.validity, l.applied, l.deadline = start, ttl, v, got, deadline
		}
		l.mu.Unlock()
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		l.mu.Lock()
		unlocking := l.unlocking
		l.mu.Unlock()
		// A refresh that lands after a concurrent Unlock's release finds
		// the grant gone; Unlock, not the refresh, says how the lease ended.
		if !unlocking {
			l.lose(fmt.Errorf("%s: the backend no longer has the grant: %w", op, err), lostNotHeld, false)
		}
		return newError(op, l.dl.Key, ErrNotHeld, err)
	}
	if err := l.unknownOutcome(op, v); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctxError(op, l.dl.Key, nil, ctx)
	}
	return newError(op, l.dl.Key, nil, err)
}

// unknownOutcome records a refresh of validity v whose outcome is unknown:
// the backend may have applied it, or may apply it later than any refresh
// still to come, so no deadline may count on more than v from now on. It
// loses the lease if its deadline has passed, and returns the error of a
// lease that has ended, or nil.
func (l *Lease) unknownOutcome(op string, v time.Duration) error {
	l.mu.Lock()
	if l.unknownV == 0 || v < l.unknownV {
		l.unknownV = v
	}
	l.mu.Unlock()
	l.expire()
	if ended := l.Err(); ended != nil {
		return l.endedError(op, ended)
	}
	return nil
}

// endedError is the error of a call on a lease that ended with cause.
func (l *Lease) endedError(op string, cause error) error {
	if errors.Is(cause, ErrClosed) {
		return newError(op, l.dl.Key, ErrClosed, nil)
	}
	return newError(op, l.dl.Key, ErrNotHeld, cause)
}

// errReleased is the cause of the error of a lease after its Unlock.
var errReleased = errors.New("lease released")

// Unlock releases the lease: the key is deleted on the backend only if this
// lease still owns it. The lease ends (Done closes) whatever the outcome.
// It returns nil on success, an error wrapping ErrNotHeld if the grant was
// already gone (expired, lost, or released before), or ErrClosed after the
// Locker was closed.
//
// If the backend fails (network, server) or ctx ends, Unlock returns an
// error wrapping that cause (not ErrNotHeld: the grant may still exist);
// the lease is ended all the same, and the Locker retries the release in
// the background until it succeeds or the grant would have expired, so that
// an outage keeps the key no longer than the outage.
//
// A nil ctx gives an error wrapping ErrInvalid, and the lease ends all the
// same: its grant is released in the background, as after a failed
// release, each attempt bounded by Options.ReleaseTimeout. A nil or zero
// Lease gives ErrInvalid.
func (l *Lease) Unlock(ctx context.Context) error {
	switch {
	case l.invalid():
		return newError("unlock", "", ErrInvalid, errNoLease)
	case ctx == nil:
		l.unlockLater()
		return newError("unlock", l.dl.Key, ErrInvalid, errNilContext)
	}
	if !l.lk.begin() { // Close waits for it; no driver call after Close
		return newError("unlock", l.dl.Key, ErrClosed, nil)
	}
	defer l.lk.calls.done()
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return l.endedError("unlock", err)
	}
	l.unlocking = true
	l.mu.Unlock()
	l.lk.sched.schedule(l) // renews no more; still ends the lease at its deadline

	released := newError("unlock", l.dl.Key, ErrNotHeld, errReleased)
	until := l.expiry()
	l.release = releaseJob{l: l, ctx: ctx, until: until}
	ok, err := l.lk.withinJob(ctx, &l.release)
	switch {
	case !ok:
		// Gave up at the context's end; the release goes on in the
		// background (and is retried there if it fails).
		l.finish(released)
		l.lk.releaseFailed(l.dl, false)
		return ctxError("unlock", l.dl.Key, nil, ctx)
	case err == nil:
		l.finish(released)
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		if l.finish(newError("unlock", l.dl.Key, ErrLost, err)) {
			l.lk.lost(l, lostNotHeld, err)
		}
		return newError("unlock", l.dl.Key, ErrNotHeld, err)
	}
	l.lk.releaseFailed(l.dl, false)
	if l.finish(released) {
		l.lk.releaseLater(l.dl, until)
	}
	if ctx.Err() != nil {
		return ctxError("unlock", l.dl.Key, nil, ctx)
	}
	return newError("unlock", l.dl.Key, nil, err)
}

// releaseJob is Unlock's driver call, a job for withinJob (kept in the
// Lease, which makes one: no closures per call). When Unlock gave up on
// it, a failure is retried in the background until the lease's expiry.
type releaseJob struct {
	l     *Lease
	ctx   context.Context
	until time.Time
}

func (r *releaseJob) run() error { return r.l.lk.d.Release(r.ctx, r.l.dl) }

func (r *releaseJob) after(err error) {
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		r.l.lk.releaseLater(r.l.dl, r.until)
	}
}

// unlockLater ends the lease as Unlock does, and releases its grant in the
// background (for an Unlock that has no context to make the call in).
func (l *Lease) unlockLater() {
	l.mu.Lock()
	ended := l.err != nil
	l.unlocking = !ended
	l.mu.Unlock()
	if ended {
		return
	}
	until := l.expiry()
	if l.finish(newError("unlock", l.dl.Key, ErrNotHeld, errReleased)) {
		l.lk.releaseLater(l.dl, until)
	}
}

// expiry is when the backend drops the grant by itself at the latest, as
// far as this process can tell: the TTL after the last successful grant or
// refresh was sent, or a little from now if that has passed.
func (l *Lease) expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return later(l.start.Add(l.ttl), time.Now().Add(100*time.Millisecond))
}

// finish ends the lease with err (nil-safe against a second call) and
// reports whether this call ended it.
func (l *Lease) finish(err error) bool { return l.end(err, false) }

// end is finish; with ifExpired, it ends the lease only if its deadline
// has passed, judged under the same lock as the end, so that a refresh
// that moved the deadline meanwhile is not undone.
func (l *Lease) end(err error, ifExpired bool) bool {
	l.mu.Lock()
	if l.err != nil || ifExpired && time.Now().Before(l.deadline) {
		l.mu.Unlock()
		return false
	}
	l.err = err
	close(l.done)
	registered, grantedAt := l.registered, l.grantedAt
	l.mu.Unlock()
	l.lk.forget(l)
	if registered {
		l.lk.ended(l, err, grantedAt)
	}
	return true
}

// lose ends the lease as lost, for why (lostExpired, ...). mayHold says
// that the backend may still hold the grant (a local deadline passed, a
// refresh's reply came too late, a driver reported a session problem);
// whether it is then released is releasesLost's rule.
func (l *Lease) lose(cause error, why int, mayHold bool) {
	l.loseIf(cause, why, mayHold, false)
}

// expire loses the lease if its deadline has passed (see end), and
// reports whether it did.
func (l *Lease) expire() bool {
	return l.loseIf(errors.New("the local validity deadline passed without a successful refresh"), lostExpired, true, true)
}

func (l *Lease) loseIf(cause error, why int, mayHold, ifExpired bool) bool {
	until := l.expiry()
	if !l.end(newError("renew", l.dl.Key, ErrLost, cause), ifExpired) {
		return false
	}
	l.lk.lost(l, why, cause)
	if mayHold && l.lk.releasesLost() {
		l.lk.releaseLater(l.dl, until)
	}
	return true
}

// releasesLost is the rule for the grant of a lease that was lost while
// the backend may still hold it: it is released in the background only
// where no other Lease can hold that grant, on a backend whose driver
// cannot resume (ZooKeeper: a grant is an ephemeral node that lives as
// long as the client's session, so it must be released, and no other
// session can resume it).
//
// Where grants can be resumed, any Lease's grant may be held by another
// Lease too (one resumed its handle, or it resumed another's), which
// renews it on its own: releasing it by owner would take it from under
// that Lease, whose Done stays open while a third client is granted the
// key. No release is needed there either. Such a grant lives by its TTL
// alone, and refreshes only ever extend it, so the lost lease's own last
// extension ends by its deadline plus the drift margin (or, after a
// refresh that was applied but whose reply came late or never, one TTL
// after it was applied): the key is free then, unless another Lease
// extended the grant, which then counts on it. Unlock and Locker.Close
// remain explicit releases of the grant, for every Lease of it.
func (lk *Locker) releasesLost() bool {
	return lk.support(Resume) != nil
}

// lostByDriver is driver.Lease.Lost.
func (l *Lease) lostByDriver(cause error) {
	if cause == nil {
		cause = errors.New("reported by the driver")
	}
	l.lose(cause, lostDriver, true)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
