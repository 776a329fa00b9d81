package memcached

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// Scheme is the URL scheme this package registers with lock.Open.
const Scheme = "memcached"

// DefaultPrefix is prepended to every memcached key when Options.Prefix is
// empty.
const DefaultPrefix = "dlock:"

// DefaultRetry is the retry strategy of a waiting Lock when Options.Retry
// is nil: exponential backoff with full jitter from 1 ms, capped at 2 ms.
// Memcached cannot tell a waiter that a key was released, so waiters poll;
// the cap bounds the hand-off delay (about 1.3 ms at the median) and sets
// the load: each waiter at the cap sends about 600 add requests a second.
// For many waiters on one key, or a busy server, pass a strategy with a
// higher cap, e.g. lock.ExponentialBackoff(time.Millisecond, 50*time.Millisecond)
// for about 40 requests a second per waiter. See the package doc, Waiting.
var DefaultRetry = lock.ExponentialBackoff(time.Millisecond, 2*time.Millisecond)

// Options configure a memcached Locker. A nil *Options means all defaults;
// so does each zero field.
type Options struct {
	lock.Options
	// Prefix is prepended to every memcached key this Locker uses
	// (DefaultPrefix when empty), to keep them apart from an
	// application's own keys on a shared server. At most 64 bytes, without
	// spaces or control bytes. Lockers that must exclude each other need the
	// same Prefix.
	Prefix string

	// TLS, when set, makes every connection of the client TLS with this
	// config: New sets client.DialContext to a tls.Dialer's, so set it
	// before the client's first use (connections already pooled stay
	// plain). A client that has its own DialContext is refused (the
	// Locker's calls fail with lock.ErrInvalid): dial TLS in it instead.
	// gomemcache dials the addresses it resolved, so the name verified is
	// TLS.ServerName, else the IP address dialled: set ServerName when the
	// certificates name hosts (URLs verify each server by its URL host).
	TLS *tls.Config
}

// New returns a Locker over client. Its Close releases its leases and
// leaves client open. Options.Retry defaults to DefaultRetry.
//
// Every process that locks the same keys must use the same server list in
// the same order (see the package doc). A Locker whose client was made
// with memcache.New or a memcache.ServerList keeps each lock and its
// fencing counter on one server; with another ServerSelector they may land
// on two.
//
// Invalid options (a bad Prefix, a nil client) are reported by the
// Locker's calls, wrapped in lock.ErrInvalid.
func New(client *memcache.Client, o *Options) *lock.Locker {
	return newLocker(client, o, false)
}

// newLocker is New for a client the Locker owns (and closes) or not.
func newLocker(client *memcache.Client, o *Options, owns bool) *lock.Locker {
	d, lo := newDriverOptions(client, selectorOf(client), o, owns)
	return lock.New(d, lo)
}

// newDriverOptions makes the driver over client, made with the
// ServerSelector sel (nil: unknown, no lanes), that o describes, and the
// lock.Options part of o, with this driver's DefaultRetry.
func newDriverOptions(client *memcache.Client, sel memcache.ServerSelector, o *Options, owns bool) (*mcDriver, *lock.Options) {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.Retry == nil {
		opts.Retry = DefaultRetry
	}
	d := &mcDriver{c: client, owns: owns, prefix: opts.Prefix}
	if d.prefix == "" {
		d.prefix = DefaultPrefix
	}
	if err := checkPrefix(d.prefix); err != nil {
		d.err = fmt.Errorf("%w: Options.Prefix: %v", driver.ErrInvalid, err)
	}
	if opts.TLS != nil && client != nil {
		if client.DialContext != nil {
			d.err = fmt.Errorf("%w: Options.TLS and a client with its own DialContext: dial TLS in it instead", driver.ErrInvalid)
		} else {
			client.DialContext = tlsDialer(opts.TLS, nil)
		}
	}
	switch {
	case client == nil:
		d.err = fmt.Errorf("%w: nil *memcache.Client", driver.ErrInvalid)
	case sel == nil && noSelector(client):
		d.err = fmt.Errorf("%w: a *memcache.Client without servers: make it with memcache.New or memcache.NewFromSelector", driver.ErrInvalid)
	}
	d.lanes = newLanes(client, sel) // after TLS set the client's DialContext
	return d, &opts.Options
}

// mcDriver implements driver.Driver over a gomemcache client.
type mcDriver struct {
	c      *memcache.Client
	lanes  *lanes // run the calls (lanes.go)
	owns   bool   // close c in Close: the Locker made it (Open)
	prefix string // of every memcached key
	err    error  // invalid options, reported by Validate
}

// Capabilities implements driver.Capable: memcached grants neither shared
// leases nor permits (see the package doc, "Not offered"); gomemcache
// takes no context, but the calls run on lanes, which return at their
// context's end (lanes.go), so lock makes them on the caller's goroutine.
// A grant's note ends the lock item's value (see noteSep).
func (d *mcDriver) Capabilities() driver.Caps {
	return driver.Caps{Name: "memcached", ReturnsAtContextEnd: d.lanes.returnsAtContextEnd(),
		Shared: driver.No(noShared), Permits: driver.No(noPermits),
		Reentry: driver.Yes, Resume: driver.Yes,
		Notes: driver.Yes}
}

// Why memcached grants no shared leases and no permits.
const (
	noShared  = "memcached grants no shared leases: each share must expire on its own, and an item has one expiration and clients have no server clock to write each share's in (see the driver's package doc)"
	noPermits = "memcached grants no semaphore permits: each permit must expire on its own, and an item has one expiration and clients have no server clock to write each permit's in (see the driver's package doc)"
)

// As sets a **memcache.Client target to the Locker's client.
func (d *mcDriver) As(target any) bool {
	if p, ok := target.(**memcache.Client); ok {
		*p = d.c
		return true
	}
	return false
}

func (d *mcDriver) keys(key string) keys { return mapKey(d.prefix, key) }

// Validate checks the options, the mode and the TTL. Every key is accepted:
// keys memcached cannot carry are hashed (see mapKey).
func (d *mcDriver) Validate(l *driver.Lease) error {
	if d.err != nil {
		return d.err
	}
	if l.Mode != driver.Exclusive {
		return fmt.Errorf("%w: memcached grants exclusive leases only", driver.ErrInvalid)
	}
	secs, err := ttlSeconds(l.TTL)
	if err != nil {
		return err
	}
	l.Validity = validity(secs) // what lock may count on: see clockLoss
	return nil
}

// Close closes the idle lanes (a busy one is closed when its call ends),
// and the client's idle connections if the Locker opened the client.
func (d *mcDriver) Close() error {
	d.lanes.close()
	if d.owns {
		return d.c.Close()
	}
	return nil
}
