package lock

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Defaults used when Options or a field of it is left zero.
const (
	// DefaultTTL is the lease time when none is given. With auto-renewal on
	// (the default) it bounds how long a crashed holder keeps a key.
	DefaultTTL = 30 * time.Second
	// DefaultReleaseTimeout bounds each attempt of a background release
	// (the clean-up after a grant whose reply was lost, the retries of a
	// failed Unlock) and Close as a whole.
	DefaultReleaseTimeout = 5 * time.Second
	// MinTTL and MaxTTL bound every TTL; drivers may narrow the range
	// (Memcached counts whole seconds from 3 s, for instance).
	MinTTL = 10 * time.Millisecond
	MaxTTL = 30 * 24 * time.Hour
	// MaxKeyLen is the longest key, in bytes, that any Locker accepts.
	MaxKeyLen = 1024
)

// Options configure a Locker. A nil *Options means all defaults; so does
// each zero field.
type Options struct {
	// TTL is the default lease time (DefaultTTL when zero). Per call,
	// WithTTL overrides it (WithTTL(0) keeps it).
	TTL time.Duration
	// DisableAutoRenew turns off automatic renewal for leases of this
	// Locker. By default a lease is renewed until it is released (see
	// Renewal in the package doc), like Redisson's watchdog or an etcd
	// session's keep-alive. Per call, WithDisableAutoRenew overrides it.
	DisableAutoRenew bool
	// Retry is how Lock waits for a held key: DefaultRetry (also when
	// nil) queues on drivers that queue waiters and backs off on the
	// others; any other strategy makes single attempts by it, as TryLock
	// makes, on every driver (see DefaultRetry). Per call, WithRetry
	// overrides it.
	Retry RetryStrategy
	// ReleaseTimeout bounds each background release attempt and Close
	// (DefaultReleaseTimeout when zero).
	ReleaseTimeout time.Duration
	// Logger receives, at Warn, renewal failures, failed background
	// releases and lost leases, and at Debug each lease's life: granted,
	// resumed, released, closed, detached (see "Metrics and logs" in the
	// package doc). A failed clean-up after an attempt that did not reach
	// the backend (it could not connect, or was turned away as its
	// clean-up was) is logged at Debug, since nothing is then left. Nil
	// means no logging.
	Logger *slog.Logger
	// MeterProvider makes the Locker's instruments (dlock.lock.wait.duration
	// and the others listed under "Metrics and logs" in the package doc),
	// once, in New. Nil means no metrics, at no cost.
	MeterProvider metric.MeterProvider
	// MetricKeys adds the key to every measurement, as the attribute
	// dlock.key. Off by default: keys may be many (one time series per key)
	// or sensitive.
	MetricKeys bool
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
	if r.Retry == nil {
		r.Retry = DefaultRetry
	}
	if err := checkRetry(r.Retry); err != nil {
		return r, fmt.Errorf("%w: Options.Retry: %v", ErrInvalid, err)
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
	owner     string // WithOwner's id; "" for a fresh anonymous owner
	named     bool   // WithOwner was given
	note      string // WithNote's text
}

// WithTTL sets the lease time for this call. Useful when one Locker serves
// jobs of very different lengths and you turn auto-renewal off: give each
// lease a TTL that covers its job. A TTL of 0 means the Locker's default
// (Options.TTL, else DefaultTTL), as a zero Options.TTL means DefaultTTL;
// a negative one, or one outside [MinTTL, MaxTTL], makes the call fail
// with ErrInvalid.
func WithTTL(ttl time.Duration) Option {
	return func(c *callOptions) { c.ttl = ttl }
}

// WithDisableAutoRenew turns automatic renewal off (true) or on (false)
// for this lease, whatever Options.DisableAutoRenew says. Turn it off when
// the work has a known bound and you would rather the key expire than be
// held by a process that hangs; renew by hand with Lease.Refresh.
func WithDisableAutoRenew(disable bool) Option {
	return func(c *callOptions) { c.autoRenew = !disable }
}

// WithAutoRenew is WithDisableAutoRenew(!on).
//
// Deprecated: use WithDisableAutoRenew, named as Options.DisableAutoRenew.
func WithAutoRenew(on bool) Option { return WithDisableAutoRenew(!on) }

// WithRetry sets the retry strategy for this Lock call: for instance
// NoRetry() to try once, or LimitRetry to bound the attempts. Any strategy
// but DefaultRetry makes the call retry single attempts instead of
// queueing, on drivers that queue waiters (see DefaultRetry).
func WithRetry(s RetryStrategy) Option {
	return func(c *callOptions) { c.retry = s }
}

// WithOwner names the owner of this Lock or TryLock, which makes it
// reentrant: while a lease of the same owner id holds the key, another
// Lock or TryLock with that id is granted at once as a re-entry, with the
// same fencing token, and the backend counts the holds. Each hold is a
// Lease of its own (its own Unlock, renewal, deadline and Done); the key is
// released when the last hold is unlocked or lost. The id is any string a
// key may be (non-empty, valid UTF-8, at most MaxKeyLen bytes); only a hash
// of it is stored. Without WithOwner, each call is a fresh owner and a
// second Lock of a held key waits like any other.
//
// The backend knows the owner only by its id: a Lock with the same id from
// another goroutine or process is a re-entry too, and holds the key beside
// the first. Use one id per logical holder (a job id, say), and never an id
// another holder could pick.
//
// A named Lock waits by its retry strategy (backing off, woken by release
// news where the driver has them), not in the driver's queue: on a busy key
// queued waiters go first. Shared leases (RLock, TryRLock) and Resume do
// not take an owner: they fail with ErrInvalid, as does a backend whose
// driver keeps no holds (see the driver's package doc).
func WithOwner(id string) Option {
	return func(c *callOptions) { c.owner, c.named = id, true }
}

// WithNote stores note with the grant, where Inspect shows it to anyone
// as the Holder's Note for as long as the grant lives: who holds the key
// and where to reach it (a host and port, say). An Election's
// announcement is one. A note is at most MaxNoteLen bytes of printable
// UTF-8 (no control characters), or the call fails with ErrInvalid;
// empty means none. A backend whose driver stores no notes refuses it
// with ErrUnsupported (Supports(Notes) says why). Resume does not take
// one: the grant keeps the note it was made with.
func WithNote(note string) Option {
	return func(c *callOptions) { c.note = note }
}

// MaxNoteLen is the longest note WithNote takes, in bytes.
const MaxNoteLen = 256

func (lk *Locker) callOptions(opts []Option) (callOptions, error) {
	c := callOptions{ttl: lk.opts.TTL, autoRenew: !lk.opts.DisableAutoRenew, retry: lk.opts.Retry}
	if len(opts) > 0 {
		p := new(callOptions) // escapes to the options: only when there are some
		*p = c
		for _, o := range opts {
			if o == nil {
				return c, fmt.Errorf("nil Option")
			}
			o(p)
		}
		c = *p
		if c.ttl == 0 { // WithTTL(0): the Locker's default
			c.ttl = lk.opts.TTL
		}
	}
	if err := checkTTL(c.ttl); err != nil {
		return c, err
	}
	if err := checkRetry(c.retry); err != nil {
		return c, err
	}
	if c.named {
		if err := checkName("owner id", c.owner); err != nil {
			return c, err
		}
	}
	return c, checkNote(c.note)
}
