package rediswatch

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// Scheme and SchemeTLS are the URL schemes this package registers with
// lock.Open.
const (
	Scheme    = "rediswatch"
	SchemeTLS = "rediswatchs"
)

// DefaultPrefix is put before every Redis key and channel name when
// Options.Prefix is empty. It is redisnx's too, so that the two drivers use
// the same lock key, fencing counter and release channel for a key.
const DefaultPrefix = "dlock:"

// MaxAttempts is how many transactions Release and Refresh run on one call
// when each is aborted by a concurrent change to the lock key (EXEC
// returning nil: go-redis's TxFailedErr), before giving up with an error
// wrapping ErrConflict.
const MaxAttempts = 5

// ErrConflict is wrapped by the error of a Release or Refresh that gave up
// after MaxAttempts transactions in a row were aborted by concurrent
// changes to the lock key. The grant may still exist; lock reports the
// error as a backend failure (not lock.ErrNotHeld), so an Unlock can be
// retried and a renewal is retried by lock's scheduler.
var ErrConflict = errors.New("rediswatch: transactions kept being aborted by concurrent changes to the key")

// Options configure a Locker made by New. A nil *Options means defaults.
type Options struct {
	lock.Options
	// Prefix is put before every Redis key and channel name the Locker
	// uses (DefaultPrefix when empty). For a key K the lock is "<prefix>{K}",
	// its fencing counter "<prefix>{K}:fence" and its release channel
	// "<prefix>{K}:rel", as with redisnx. It must not contain "{" or "}":
	// the key's braces are the Redis Cluster hash tag.
	Prefix string
}

// New returns a Locker over client, which may be a *redis.Client
// (standalone or Sentinel failover), a *redis.ClusterClient or any other
// redis.UniversalClient. The Locker's Close leaves client open.
func New(client redis.UniversalClient, o *Options) lock.Locker {
	return newLocker(client, o, false)
}

func newLocker(client redis.UniversalClient, o *Options, owns bool) lock.Locker {
	l, _ := newLockerDriver(client, o, owns)
	return l
}

// newLockerDriver is newLocker, also returning the driver (for this
// package's tests).
func newLockerDriver(client redis.UniversalClient, o *Options, owns bool) (lock.Locker, *watchDriver) {
	d, lo := newDriverOptions(client, o, owns)
	return lock.New(d, lo), d
}

// newDriverOptions makes the driver over client that o describes, and the
// lock.Options part of o.
func newDriverOptions(client redis.UniversalClient, o *Options, owns bool) (*watchDriver, *lock.Options) {
	var lo *lock.Options
	prefix := DefaultPrefix
	if o != nil {
		lo = &o.Options
		if o.Prefix != "" {
			prefix = o.Prefix
		}
	}
	return newDriver(client, prefix, owns), lo
}

// watchDriver implements driver.Driver, driver.Queuer, driver.Notifier and
// driver.BatchRefresher with WATCH/MULTI/EXEC transactions only.
type watchDriver struct {
	client redis.UniversalClient
	owns   bool // opened from a URL: Close closes client
	prefix string
	bad    error // invalid configuration, reported by Validate
	n      *notifier
	stats  counters
	bg     sync.WaitGroup // leaves of the queue still under way; Close waits

	maxAttempts int
	// beforeExec, when set (by tests), runs between a transaction's read
	// round trip and its EXEC.
	beforeExec atomic.Pointer[func(op, lockKey string)]
}

func newDriver(client redis.UniversalClient, prefix string, owns bool) *watchDriver {
	if redisx.NilClient(client) {
		client = nil
	}
	d := &watchDriver{
		client:      client,
		owns:        owns,
		prefix:      prefix,
		n:           newNotifier(client, prefix),
		maxAttempts: MaxAttempts,
	}
	switch {
	case client == nil:
		d.bad = errors.New("rediswatch: nil Redis client")
	case strings.ContainsAny(prefix, "{}"):
		d.bad = fmt.Errorf("rediswatch: key prefix %q contains \"{\" or \"}\"", prefix)
	}
	return d
}

// Validate refuses what this driver cannot carry. Every key lock accepts
// works (see keys.go).
func (d *watchDriver) Validate(l *driver.Lease) error {
	switch {
	case d.bad != nil:
		return fmt.Errorf("%w: %v", driver.ErrInvalid, d.bad)
	case l.Mode != driver.Exclusive:
		return fmt.Errorf("%w: rediswatch: %v leases are not supported", driver.ErrInvalid, l.Mode)
	case l.TTL < time.Millisecond:
		return fmt.Errorf("%w: rediswatch: TTL %v is below Redis's 1ms resolution", driver.ErrInvalid, l.TTL)
	}
	return nil
}

// px is the TTL as Redis applies it: whole milliseconds, rounded down.
func px(ttl time.Duration) time.Duration { return ttl.Truncate(time.Millisecond) }

// As exposes the client and the driver's counters; see the package doc.
func (d *watchDriver) As(target any) bool {
	switch t := target.(type) {
	case *redis.UniversalClient:
		*t = d.client
	case **redis.Client:
		c, ok := d.client.(*redis.Client)
		if !ok {
			return false
		}
		*t = c
	case **redis.ClusterClient:
		c, ok := d.client.(*redis.ClusterClient)
		if !ok {
			return false
		}
		*t = c
	case *Stats:
		*t = d.stats.snapshot(d.n)
	default:
		return false
	}
	return true
}

// Close stops the release subscription and closes the client if the
// driver opened it.
func (d *watchDriver) Close() error {
	d.bg.Wait()
	err := d.n.close()
	if d.owns && d.client != nil {
		if cerr := d.client.Close(); cerr != nil && !errors.Is(cerr, redis.ErrClosed) {
			err = errors.Join(err, cerr)
		}
	}
	return err
}
