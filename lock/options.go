package lock

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults used when Options or a field of it is left zero.
const (
	// DefaultTTL is the lease time when none is given. With auto-renewal on
	// (the default) it bounds how long a crashed holder keeps a key.
	DefaultTTL = 30 * time.Second
	// DefaultReleaseTimeout bounds background releases: the clean-up after
	// a grant whose reply was lost, and the releases done by Close.
	DefaultReleaseTimeout = 5 * time.Second
	// MinTTL and MaxTTL bound every TTL; drivers may narrow the range
	// (Memcached counts whole seconds from 2 s, for instance).
	MinTTL = 10 * time.Millisecond
	MaxTTL = 30 * 24 * time.Hour
	// MaxKeyLen is the longest key, in bytes, that any Locker accepts.
	MaxKeyLen = 1024
)

// DefaultRetry is the retry strategy used when none is given: exponential
// backoff with full jitter from 2 ms up to 250 ms between attempts, without
// limit (Lock waits until its context ends). Drivers that are told of
// releases retry at once on the news, so the backoff only bounds how long a
// missed notification can delay a waiter.
var DefaultRetry = ExponentialBackoff(2*time.Millisecond, 250*time.Millisecond)

// Options configure a Locker. A nil *Options means all defaults; so does
// each zero field.
type Options struct {
	// TTL is the default lease time (DefaultTTL when zero). Per call,
	// WithTTL overrides it.
	TTL time.Duration
	// DisableAutoRenew turns off automatic renewal for leases of this
	// Locker. By default a lease is refreshed every TTL/3 until it is
	// released, like Redisson's watchdog or an etcd session's keep-alive.
	// Per call, WithAutoRenew overrides it.
	DisableAutoRenew bool
	// Retry is the strategy Lock uses between attempts on a held key
	// (DefaultRetry when nil). Per call, WithRetry overrides it. Drivers
	// that queue waiters (ZooKeeper, redisnx, memory) queue a Lock call
	// only when no strategy is given here or by WithRetry: a strategy
	// given explicitly is followed with single attempts, as TryLock makes,
	// so that NoRetry or LimitRetry bound the call on every backend.
	Retry RetryStrategy
	// ReleaseTimeout bounds background releases (DefaultReleaseTimeout
	// when zero).
	ReleaseTimeout time.Duration
	// Logger receives renewal failures and lost leases. Nil means no
	// logging.
	Logger *slog.Logger

	retrySet bool // Retry was given: see Retry
}

// resolved returns a copy of o with every default filled in, or an error
// wrapping ErrInvalid.
func (o *Options) resolved() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.TTL == 0 {
		r.TTL = DefaultTTL
	}
	if err := checkTTL(r.TTL); err != nil {
		return r, fmt.Errorf("%w: Options.TTL: %v", ErrInvalid, err)
	}
	r.retrySet = r.Retry != nil
	if r.Retry == nil {
		r.Retry = DefaultRetry
	}
	if r.ReleaseTimeout == 0 {
		r.ReleaseTimeout = DefaultReleaseTimeout
	}
	if r.ReleaseTimeout < 0 {
		return r, fmt.Errorf("%w: Options.ReleaseTimeout %v is negative", ErrInvalid, r.ReleaseTimeout)
	}
	return r, nil
}

// An Option changes one call to Lock, TryLock, RLock or TryRLock.
type Option func(*callOptions)

type callOptions struct {
	ttl       time.Duration
	autoRenew bool
	retry     RetryStrategy
	retrySet  bool // a strategy was given: no queueing (see Options.Retry)
}

// WithTTL sets the lease time for this call. Useful when one Locker serves
// jobs of very different lengths and you turn auto-renewal off: give each
// lease a TTL that covers its job.
func WithTTL(ttl time.Duration) Option {
	return func(c *callOptions) { c.ttl = ttl }
}

// WithAutoRenew turns automatic renewal on or off for this lease. Turn it
// off when the work has a known bound and you would rather the key expire
// than be held by a process that hangs; renew by hand with Lease.Refresh.
func WithAutoRenew(on bool) Option {
	return func(c *callOptions) { c.autoRenew = on }
}

// WithRetry sets the retry strategy for this Lock call: for instance
// NoRetry() to try once, or LimitRetry to bound the attempts. On drivers
// that queue waiters, the call then makes single attempts instead of
// queueing (see Options.Retry).
func WithRetry(s RetryStrategy) Option {
	return func(c *callOptions) { c.retry, c.retrySet = s, true }
}

func (lk *locker) callOptions(opts []Option) (callOptions, error) {
	c := callOptions{ttl: lk.opts.TTL, autoRenew: !lk.opts.DisableAutoRenew, retry: lk.opts.Retry, retrySet: lk.opts.retrySet}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("nil Option")
		}
		o(&c)
	}
	if err := checkTTL(c.ttl); err != nil {
		return c, err
	}
	if c.retry == nil {
		return c, fmt.Errorf("nil RetryStrategy")
	}
	return c, nil
}
