package rediswatch

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// Scheme and SchemeTLS (Scheme over TLS) are the URL schemes this package
// registers with lock.Open; see URLs in the package doc.
const Scheme, SchemeTLS = "rediswatch", "rediswatchs"

func init() {
	redisx.Register(Scheme, SchemeTLS, func(c redisx.Core) driver.Driver { return newDriver(c) })
}

// DefaultPrefix is put before every Redis key and channel name when
// Options.Prefix is empty. It is redisnx's too, so that the two drivers use
// the same lock key, fencing counter and release channel for a key.
const DefaultPrefix = redisx.DefaultPrefix

// MaxAttempts is how many transactions Release and Refresh run on one call
// when each is aborted by a concurrent change to the lock key (EXEC
// returning nil: go-redis's TxFailedErr), before giving up with an error
// wrapping ErrConflict. A set's transaction (LockMany, TryLockMany) is tried
// as many times, and then refused as held.
const MaxAttempts = 5

// ErrConflict is wrapped by the error of a Release or Refresh that gave up
// after MaxAttempts transactions in a row were aborted by concurrent
// changes to the lock key. The grant may still exist; lock reports the
// error as a backend failure (not lock.ErrNotHeld), so an Unlock can be
// retried and a renewal is retried by lock's scheduler.
var ErrConflict = errors.New("rediswatch: transactions kept being aborted by concurrent changes to the key")

// Options configure a Locker made by New: lock's options, and the Prefix
// of every Redis name the Locker uses (DefaultPrefix when empty; it must
// not contain '{' or '}'). A nil *Options means defaults.
type Options = redisx.Options

// New returns a Locker over client, which may be a *redis.Client
// (standalone or Sentinel failover), a *redis.ClusterClient or any other
// redis.UniversalClient. The Locker's Close leaves client open.
func New(client redis.UniversalClient, o *Options) *lock.Locker {
	core, lo := redisx.NewCore("rediswatch", client, o, false)
	return lock.New(newDriver(core), lo)
}

// watchDriver implements driver.Driver, driver.Queuer, driver.Notifier and
// driver.BatchRefresher with WATCH/MULTI/EXEC transactions only.
type watchDriver struct {
	redisx.Core
	stats counters

	maxAttempts int
	// noExpireGT: the server refused PEXPIRE's GT option (Redis before
	// 7.0), so member grants are renewed as extendMemberWatched does.
	noExpireGT atomic.Bool
	// beforeExec, when set (by tests), runs between a transaction's read
	// round trip and its EXEC.
	beforeExec atomic.Pointer[func(op, lockKey string)]
}

var (
	_ driver.Driver         = (*watchDriver)(nil)
	_ driver.Notifier       = (*watchDriver)(nil)
	_ driver.Queuer         = (*watchDriver)(nil)
	_ driver.BatchRefresher = (*watchDriver)(nil)
	_ driver.Resumer        = (*watchDriver)(nil)
)

func newDriver(c redisx.Core) *watchDriver {
	c.SharedLeases = true
	c.Permits = true
	return &watchDriver{Core: c, maxAttempts: MaxAttempts}
}

// px is the TTL as Redis applies it: whole milliseconds, rounded down.
func px(ttl time.Duration) time.Duration { return ttl.Truncate(time.Millisecond) }

// Capabilities implements driver.Capable. Over a *redis.Client (single
// node or Sentinel failover), every transaction runs on a lane whose
// connection is closed when the call's context ends (redisx.Lanes), so
// lock runs calls on the caller's goroutine.
func (d *watchDriver) Capabilities() driver.Caps {
	return driver.Caps{Name: "rediswatch", ReturnsAtContextEnd: d.Lanes.ReturnsAtContextEnd(),
		Shared: driver.Yes, Permits: driver.Yes, Reentry: driver.Yes, Resume: driver.Yes, Notes: driver.Yes}
}

// As exposes the client and the driver's counters; see the package doc.
func (d *watchDriver) As(target any) bool {
	if t, ok := target.(*Stats); ok {
		*t = d.stats.snapshot(d.Notify)
		return true
	}
	return d.Core.As(target)
}
