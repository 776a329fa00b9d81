package redisnx

import (
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is put before every Redis key and channel name when
// Options.Prefix is empty; rediswatch's too.
const DefaultPrefix = redisx.DefaultPrefix

// Options configure a Locker made by New: lock's options, and the Prefix
// of every Redis name the Locker uses (DefaultPrefix when empty; it must
// not contain '{' or '}'). A nil *Options means defaults.
type Options = redisx.Options

// New returns a Locker over client: a *redis.Client (also one made by
// redis.NewFailoverClient for Sentinel), a *redis.ClusterClient or a
// *redis.Ring. Its Close releases the Locker's leases and its pub/sub
// connection and leaves client open.
//
// Invalid options (a prefix with braces, a nil client) are reported by the
// Locker's first call, as an error wrapping lock.ErrInvalid.
func New(client redis.UniversalClient, o *Options) *lock.Locker {
	core, lo := redisx.NewCore("redisnx", client, o, false)
	return lock.New(newDriver(core), lo)
}

// redisDriver implements driver.Driver, driver.Queuer, driver.Notifier and
// driver.BatchRefresher over go-redis, with Lua scripts.
type redisDriver struct {
	redisx.Core
	blockers chan struct{} // the grant lists' follow-ups (list.go)
	lists    lists         // off when the server refuses them (refused.go)
	inline   bool          // waits with grant lists step inline (inline.go)
	// waitLoaded: the server answered wait.lua's EVAL or EVALSHA: inline
	// steps send EVALSHA (inline.go).
	waitLoaded atomic.Bool
}

var (
	_ driver.Driver         = (*redisDriver)(nil)
	_ driver.Notifier       = (*redisDriver)(nil)
	_ driver.Queuer         = (*redisDriver)(nil)
	_ driver.BatchRefresher = (*redisDriver)(nil)
	_ driver.Resumer        = (*redisDriver)(nil)
)

// Capabilities implements driver.Capable. Shared grants are members of
// the readers set P{K}:r, with the lock key holding "R"; permits members
// of the permits set P{K}:s, with the lock key holding "S" and the limit;
// a named owner's grant keeps its holds in P{K}:h, and grants' notes are
// in P{K}:n (see prelude.lua). Over
// a *redis.Client (single node or Sentinel failover), every script runs on
// a lane whose connection is closed when the call's context ends
// (redisx.Lanes), so lock runs calls on the caller's goroutine.
func (d *redisDriver) Capabilities() driver.Caps {
	return driver.Caps{Name: "redisnx", ReturnsAtContextEnd: d.Lanes.ReturnsAtContextEnd(),
		Shared: driver.Yes, Permits: driver.Yes, Reentry: driver.Yes, Resume: driver.Yes,
		Notes: driver.Yes}
}

func newDriver(c redisx.Core) *redisDriver {
	c.SharedLeases = true
	c.Permits = true
	return &redisDriver{Core: c, blockers: newBlockers(c.Client), inline: c.Lanes.ReturnsAtContextEnd()}
}

// ms is a TTL in whole milliseconds, as PX applies it, and that duration.
func ms(ttl time.Duration) (int64, time.Duration) {
	n := ttl.Milliseconds()
	return n, time.Duration(n) * time.Millisecond
}
