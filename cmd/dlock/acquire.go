package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// openTimeout bounds lock.Open and a single attempt (-wait 0), so that an
// unreachable backend is reported instead of waited for.
const openTimeout = 15 * time.Second

// acquired is the outcome of taking the lock.
type acquired struct {
	locker lock.Locker
	lease  *lock.Lease
	code   int    // exit status when lease is nil
	msg    string // why, for the "dlock:" line
}

// acquire opens the backend and takes the lock as -wait says. ctx ends
// when dlock gets a signal before the lock is granted.
func (cfg *runConfig) acquire(ctx context.Context) acquired {
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	locker, err := lock.OpenWith(octx, cfg.url, &lock.Options{Logger: cfg.log}) // renewal failures and lost leases go to dlock's log
	cancel()
	if err != nil {
		if errors.Is(err, lock.ErrInvalid) {
			return acquired{code: exitUsage, msg: err.Error()}
		}
		return acquired{code: exitBackend, msg: fmt.Sprintf("opening %s: %v", backendName(cfg.url), err)}
	}
	var opts []lock.Option
	if cfg.ttl > 0 {
		opts = append(opts, lock.WithTTL(cfg.ttl))
	}
	if cfg.owner != "" {
		opts = append(opts, lock.WithOwner(cfg.owner))
	}
	try, wait := locker.TryLock, locker.Lock
	if cfg.limit > 0 {
		sem, err := lock.Semaphores(locker)
		if err != nil {
			locker.Close()
			return acquired{code: exitUsage, msg: fmt.Sprintf("-n needs semaphore permits, which %s does not grant: %v", backendName(cfg.url), err)}
		}
		try = func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
			return sem.TryAcquire(ctx, key, cfg.limit, opts...)
		}
		wait = func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
			return sem.Acquire(ctx, key, cfg.limit, opts...)
		}
	}
	var lease *lock.Lease
	switch {
	case cfg.wait.once():
		actx, cancel := context.WithTimeout(ctx, openTimeout)
		lease, err = try(actx, cfg.key, opts...)
		cancel()
	case cfg.wait.forever:
		lease, err = wait(ctx, cfg.key, opts...)
	default:
		wctx, cancel := context.WithTimeout(ctx, cfg.wait.d)
		lease, err = wait(wctx, cfg.key, opts...)
		cancel()
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

// childEnv is the environment of the command: dlock's own, with DLOCK_KEY,
// DLOCK_TOKEN and DLOCK_LEASE (the lease's handle) set to the lease's,
// DLOCK_LIMIT to its semaphore's number of permits for a permit (and
// removed otherwise: an outer run's would mislead), and DLOCK_OWNER to
// owner when it is not "".
func childEnv(lease *lock.Lease, owner string) []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		if !hasPrefix(kv, "DLOCK_KEY=") && !hasPrefix(kv, "DLOCK_TOKEN=") && !hasPrefix(kv, "DLOCK_LEASE=") && !hasPrefix(kv, "DLOCK_LIMIT=") &&
			(owner == "" || !hasPrefix(kv, "DLOCK_OWNER=")) {
			out = append(out, kv)
		}
	}
	out = append(out, "DLOCK_KEY="+lease.Key(), fmt.Sprintf("DLOCK_TOKEN=%d", lease.Token()), "DLOCK_LEASE="+lease.Handle())
	if n := lease.Limit(); n > 0 {
		out = append(out, fmt.Sprintf("DLOCK_LIMIT=%d", n))
	}
	if owner != "" {
		out = append(out, "DLOCK_OWNER="+owner)
	}
	return out
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
