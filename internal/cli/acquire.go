package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// connectAllowance is the time dlock gives the backend to answer on top of
// -wait: opening it (a ZooKeeper session; the Redis and memcached clients
// connect lazily) may take until -wait plus connectAllowance after dlock
// started, and the first attempt at the key gets connectAllowance too.
// With -wait forever, opening gets connectAllowance alone: forever is for
// a held lock, and an unreachable backend is reported (exit 125) rather
// than waited for in silence.
const connectAllowance = 2 * time.Second

// closeAllowance is the part of connectAllowance kept for closing the
// Locker after a failed attempt (its clean-up, which an unreachable
// backend makes fail until the end), so that dlock exits within the
// allowance it states; an attempt gets the rest, attemptAllowance.
const (
	closeAllowance   = 250 * time.Millisecond
	attemptAllowance = connectAllowance - closeAllowance
)

// acquired is the outcome of taking the lock.
type acquired struct {
	locker *lock.Locker
	lease  *lock.Lease
	code   int    // exit status when lease is nil
	msg    string // why, for the "dlock:" line
}

// acquire opens the backend and takes the lock as -wait says, -wait
// counted from began. ctx ends when dlock gets a signal before the lock is
// granted.
func (cfg *runConfig) acquire(ctx context.Context, began time.Time) acquired {
	openBy := began.Add(connectAllowance)
	if !cfg.wait.forever {
		openBy = openBy.Add(cfg.wait.d)
	}
	octx, cancel := context.WithDeadline(ctx, openBy)
	locker, err := lock.OpenWith(octx, cfg.url, &lock.Options{
		Logger: cfg.log, // renewal failures and lost leases go to dlock's log
		// Close after a failed attempt waits this long at most for its
		// clean-up, which an unreachable backend makes fail until the end.
		ReleaseTimeout: closeAllowance,
	})
	cancel()
	if err == nil {
		cfg.mu.Lock()
		cfg.locker = locker
		cfg.mu.Unlock()
	}
	if err != nil {
		if errors.Is(err, lock.ErrInvalid) {
			return acquired{code: exitUsage, msg: err.Error()}
		}
		msg := fmt.Sprintf("opening %s: %v", backendName(cfg.url), err)
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			msg += fmt.Sprintf(" (dlock gives up on an unreachable backend after -wait plus %v; -wait forever counts as 0 here)", connectAllowance)
		}
		return acquired{code: exitBackend, msg: msg}
	}
	var opts []lock.Option
	if cfg.ttl > 0 {
		opts = append(opts, lock.WithTTL(cfg.ttl))
	}
	if cfg.owner != "" {
		opts = append(opts, lock.WithOwner(cfg.owner))
	}
	try, wait := locker.TryLock, locker.Lock
	if cfg.elect {
		if try, wait, err = cfg.campaigners(locker); err != nil {
			locker.Close()
			return acquired{code: exitUsage, msg: err.Error()}
		}
	}
	if cfg.limit > 0 {
		sem := locker
		err := sem.Supports(lock.Permits)
		if err != nil {
			locker.Close()
			return acquired{code: exitUsage, msg: fmt.Sprintf("a limit (-n N, -limit N) needs semaphore permits, which %s does not grant: %v", backendName(cfg.url), err)}
		}
		try = func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
			return sem.TryAcquire(ctx, key, cfg.limit, opts...)
		}
		wait = func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
			return sem.Acquire(ctx, key, cfg.limit, opts...)
		}
	}
	// One attempt first, given attemptAllowance: it takes a free key at
	// once, and it reports an unreachable backend with its cause (refused,
	// a wrong password) rather than leaving a wait to be ended by -wait
	// while the client is still connecting. Only a held key is waited for.
	actx, cancel := context.WithTimeout(ctx, attemptAllowance)
	lease, err := try(actx, cfg.key, opts...)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %v", attemptAllowance, err)
	}
	waitBy := began.Add(cfg.wait.d)
	switch {
	case !errors.Is(err, lock.ErrHeld) || cfg.wait.once() || ctx.Err() != nil:
	case cfg.wait.forever:
		lease, err = wait(ctx, cfg.key, opts...)
	case time.Until(waitBy) > 0:
		wctx, cancel := context.WithDeadline(ctx, waitBy)
		lease, err = wait(wctx, cfg.key, opts...)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			lease, err = cfg.lastAttempt(ctx, try, opts, err)
		}
	default:
		// Opening took the whole -wait: the attempt found the key held.
	}
	if err == nil {
		return acquired{locker: locker, lease: lease}
	}
	locker.Close()
	a := acquired{code: exitBackend, msg: fmt.Sprintf("%s: %v", backendName(cfg.url), err)}
	switch {
	case errors.Is(err, lock.ErrInvalid):
		a.code, a.msg = exitUsage, err.Error()
	case ctx.Err() != nil:
		// A signal ended the wait; the caller picks the status.
	case errors.Is(err, lock.ErrHeld) && cfg.limit > 0:
		a.code, a.msg = cfg.conflict, fmt.Sprintf("not acquired: no permit of %q is free on %s (-n %d: all taken, or the key is locked)", cfg.key, backendName(cfg.url), cfg.limit)
	case errors.Is(err, lock.ErrHeld):
		// TryLock, or a Lock whose retry strategy gave up, found it held.
		a.code, a.msg = cfg.conflict, fmt.Sprintf("not acquired: %q is held on %s", cfg.key, backendName(cfg.url))
	case !cfg.wait.once() && errors.Is(err, context.DeadlineExceeded) && cfg.limit > 0:
		a.code, a.msg = cfg.conflict, fmt.Sprintf("not acquired: no permit of %q came free on %s within -wait %v (-n %d)", cfg.key, backendName(cfg.url), cfg.wait.d, cfg.limit)
	case !cfg.wait.once() && errors.Is(err, context.DeadlineExceeded):
		a.code, a.msg = cfg.conflict, fmt.Sprintf("not acquired: %q still held on %s after -wait %v", cfg.key, backendName(cfg.url), cfg.wait.d)
	}
	return a
}

// lastAttempt follows a wait that -wait ended (waitErr): that alone does
// not tell a key still held from a backend that never answered (a refused
// connection that the client retried past -wait, say). One attempt more,
// given attemptAllowance, tells: it returns waitErr when the key is held,
// the attempt's own error when it failed otherwise, or the lease when the
// key came free just then.
func (cfg *runConfig) lastAttempt(ctx context.Context, try func(context.Context, string, ...lock.Option) (*lock.Lease, error), opts []lock.Option, waitErr error) (*lock.Lease, error) {
	actx, cancel := context.WithTimeout(ctx, attemptAllowance)
	defer cancel()
	lease, err := try(actx, cfg.key, opts...)
	switch {
	case err == nil:
		return lease, nil
	case errors.Is(err, lock.ErrHeld) || ctx.Err() != nil:
		return nil, waitErr
	case errors.Is(err, context.DeadlineExceeded):
		// Not the -wait's deadline: the backend's silence.
		return nil, fmt.Errorf("-wait %v ran out, and a last attempt had no answer within %v: %v", cfg.wait.d, attemptAllowance, err)
	}
	return nil, err
}

// childEnv is the environment of the command: dlock's own, with DLOCK_KEY,
// DLOCK_TOKEN and DLOCK_LEASE (the lease's handle) set to the lease's,
// DLOCK_LIMIT to its semaphore's number of permits for a permit (and
// removed otherwise: an outer run's would mislead), DLOCK_TERM to the
// token for a term (dlock elect; removed otherwise), and DLOCK_OWNER to
// owner when it is not "".
func childEnv(lease *lock.Lease, owner string, term bool) []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		if !hasPrefix(kv, "DLOCK_KEY=") && !hasPrefix(kv, "DLOCK_TOKEN=") && !hasPrefix(kv, "DLOCK_LEASE=") && !hasPrefix(kv, "DLOCK_LIMIT=") && !hasPrefix(kv, "DLOCK_TERM=") &&
			(owner == "" || !hasPrefix(kv, "DLOCK_OWNER=")) {
			out = append(out, kv)
		}
	}
	out = append(out, "DLOCK_KEY="+lease.Key(), fmt.Sprintf("DLOCK_TOKEN=%d", lease.Token()), "DLOCK_LEASE="+lease.Handle())
	if n := lease.Limit(); n > 0 {
		out = append(out, fmt.Sprintf("DLOCK_LIMIT=%d", n))
	}
	if term {
		out = append(out, fmt.Sprintf("DLOCK_TERM=%d", lease.Token()))
	}
	if owner != "" {
		out = append(out, "DLOCK_OWNER="+owner)
	}
	return out
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
