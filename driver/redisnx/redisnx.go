package redisnx

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is put before every Redis key and channel name when
// Options.Prefix is empty.
const DefaultPrefix = "dlock:"

// Options configure a Locker made by New. A nil *Options means defaults.
type Options struct {
	lock.Options
	// Prefix is put before every Redis key and channel name the Locker
	// uses (DefaultPrefix when empty). It must not contain '{' or '}': the
	// driver places the hash tag itself.
	Prefix string
}

// New returns a Locker over client: a *redis.Client (also one made by
// redis.NewFailoverClient for Sentinel), a *redis.ClusterClient or a
// *redis.Ring. Its Close releases the Locker's leases and its pub/sub
// connection and leaves client open.
//
// Invalid options (a prefix with braces, a nil client) are reported by the
// Locker's first call, as an error wrapping lock.ErrInvalid.
func New(client redis.UniversalClient, o *Options) lock.Locker {
	return newLocker(client, o, false)
}

func newLocker(client redis.UniversalClient, o *Options, owned bool) lock.Locker {
	d, lo := newDriverOptions(client, o, owned)
	return lock.New(d, lo)
}

// newDriverOptions makes the driver over client that o describes, and the
// lock.Options part of o.
func newDriverOptions(client redis.UniversalClient, o *Options, owned bool) (*redisDriver, *lock.Options) {
	var lo *lock.Options
	prefix := DefaultPrefix
	if o != nil {
		lo = &o.Options
		if o.Prefix != "" {
			prefix = o.Prefix
		}
	}
	return newDriver(client, prefix, owned), lo
}

// topology says how keys map to servers, for batching and pub/sub.
type topology uint8

const (
	single  topology = iota // one primary: a Client, Sentinel failover, a wrapper
	cluster                 // Redis Cluster: scripts stay within one slot
	ring                    // Ring: independent shards chosen by key
)

// redisDriver implements driver.Driver, driver.Queuer, driver.Notifier and
// driver.BatchRefresher over go-redis.
type redisDriver struct {
	client redis.UniversalClient
	owned  bool // opened from a URL: Close closes client
	prefix string
	topo   topology
	bad    error // set when the configuration is unusable; Validate reports it
	notify *notifier
	bg     sync.WaitGroup // leave.lua runs that outlived their Lock call
}

var (
	_ driver.Driver         = (*redisDriver)(nil)
	_ driver.Notifier       = (*redisDriver)(nil)
	_ driver.BatchRefresher = (*redisDriver)(nil)
)

func newDriver(client redis.UniversalClient, prefix string, owned bool) *redisDriver {
	if redisx.NilClient(client) {
		client = nil
	}
	d := &redisDriver{client: client, owned: owned, prefix: prefix}
	switch client.(type) {
	case *redis.ClusterClient:
		d.topo = cluster
	case *redis.Ring:
		d.topo = ring
	}
	switch {
	case client == nil:
		d.bad = errors.New("redisnx: nil client")
	case strings.ContainsAny(prefix, "{}"):
		d.bad = fmt.Errorf("redisnx: key prefix %q contains '{' or '}'", prefix)
	}
	d.notify = newNotifier(d)
	return d
}

// Validate accepts every key lock accepts (Redis keys are binary-safe) and
// TTLs of at least a millisecond, counted in whole milliseconds.
func (d *redisDriver) Validate(l *driver.Lease) error {
	switch {
	case d.bad != nil:
		return fmt.Errorf("%w: %v", driver.ErrInvalid, d.bad)
	case l.Mode != driver.Exclusive:
		return fmt.Errorf("%w: redisnx grants exclusive leases only", driver.ErrInvalid)
	case !utf8.ValidString(l.Key):
		return fmt.Errorf("%w: key is not valid UTF-8", driver.ErrInvalid)
	case l.TTL < time.Millisecond:
		return fmt.Errorf("%w: TTL %v is below redisnx's 1ms resolution", driver.ErrInvalid, l.TTL)
	}
	return nil
}

// ms is a TTL in whole milliseconds, as PX applies it, and that duration.
func ms(ttl time.Duration) (int64, time.Duration) {
	n := ttl.Milliseconds()
	return n, time.Duration(n) * time.Millisecond
}

// As sets a *redis.UniversalClient target to the client, and a
// **redis.Client, **redis.ClusterClient or **redis.Ring target when the
// client is of that type.
func (d *redisDriver) As(target any) bool {
	switch p := target.(type) {
	case *redis.UniversalClient:
		*p = d.client
		return d.client != nil
	case **redis.Client:
		c, ok := d.client.(*redis.Client)
		if ok {
			*p = c
		}
		return ok
	case **redis.ClusterClient:
		c, ok := d.client.(*redis.ClusterClient)
		if ok {
			*p = c
		}
		return ok
	case **redis.Ring:
		c, ok := d.client.(*redis.Ring)
		if ok {
			*p = c
		}
		return ok
	}
	return false
}

// Close ends the pub/sub connections and, for a Locker opened from a URL,
// closes the client.
func (d *redisDriver) Close() error {
	d.notify.close()
	d.bg.Wait()
	if d.owned && d.client != nil {
		if err := d.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			return fmt.Errorf("redisnx: closing the client: %w", err)
		}
	}
	return nil
}
