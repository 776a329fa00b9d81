package etcd

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultPrefix starts every etcd key the driver writes when
// Options.Prefix is empty.
const DefaultPrefix = "dlock/"

// Options configure a Locker over etcd.
type Options struct {
	lock.Options
	// Prefix starts every etcd key the driver writes (DefaultPrefix when
	// empty); Lockers that must exclude each other need the same Prefix.
	// It is used as it is: end it with "/" to keep dlock's keys under a
	// directory of their own.
	Prefix string
}

// New returns a Locker over c. Its Close releases its leases and leaves c
// open.
func New(c *clientv3.Client, o *Options) *lock.Locker {
	d, lo := newDriver(o)
	if c == nil {
		d.err = fmt.Errorf("%w: etcd: nil *clientv3.Client", driver.ErrInvalid)
	}
	d.c = c
	return lock.New(d, lo)
}

// MutexPrefix is the prefix to give concurrency.NewMutex so that the
// mutex and dlock's locks of key, under Options.Prefix prefix (empty:
// DefaultPrefix), exclude each other: the mutex's keys are then entries
// of the key's queue, which dlock reads as exclusive, and dlock's are
// keys under the mutex's prefix, for which the mutex waits.
func MutexPrefix(prefix, key string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + "q/" + escape(key)
}

// etcdDriver implements driver.Driver and its optional capabilities over
// an etcd v3 client.
type etcdDriver struct {
	err    error // an option error, returned by every call
	prefix string
	id     string           // names this Locker's entries (slots.go)
	wall   func() time.Time // the wall clock of tokens and SINCE (time.Now; tests skew it)

	cmu   sync.Mutex
	c     *clientv3.Client
	cfg   *clientv3.Config // set for a client made from a URL, at the first call
	login *login           // that client's log-in, when the URL has a user
	owned bool
	conn  *conn
	w     *watcher

	clmu   sync.Mutex // held while the counter lease is made
	cl     int64      // the lease counters are attached to (counter.go); 0 before the first grant
	clMade time.Time

	mu        sync.Mutex
	waits     map[string]*waitState   // queued waits, by owner
	pending   map[string][]int64      // leases made for an attempt still under way, by owner
	holders   map[string]*holderWatch // a grant's watch on its entry, by owner
	spares    map[int64][]spare       // leases with no key, kept for grants, by TTL in seconds (spares.go)
	kept      map[int64]spare         // granted leases whose expiry is known, by id
	slotUsers map[slotKey]string      // the attempt (owner) holding each slot in use (slots.go)
	slotOf    map[string]held         // by owner
	busy      map[string]time.Time    // when a waiter last found each key queued (markQueued)
	closed    bool
}

var (
	_ driver.Driver         = (*etcdDriver)(nil)
	_ driver.Queuer         = (*etcdDriver)(nil)
	_ driver.BatchRefresher = (*etcdDriver)(nil)
	_ driver.Resumer        = (*etcdDriver)(nil)
	_ driver.Inspector      = (*etcdDriver)(nil)
)

func newDriver(o *Options) (*etcdDriver, *lock.Options) {
	var opts Options
	if o != nil {
		opts = *o
	}
	d := &etcdDriver{
		prefix:    opts.Prefix,
		id:        newLockerID(),
		wall:      time.Now,
		slotUsers: map[slotKey]string{},
		slotOf:    map[string]held{},
		waits:     map[string]*waitState{},
		pending:   map[string][]int64{},
		holders:   map[string]*holderWatch{},
		spares:    map[int64][]spare{},
		kept:      map[int64]spare{},
		busy:      map[string]time.Time{},
	}
	if d.prefix == "" {
		d.prefix = DefaultPrefix
	}
	return d, &opts.Options
}

// Capabilities implements driver.Capable. Every request is a gRPC call,
// which ends with its context; a Locker opened from a URL with a user and
// password logs in at its first call, with that call's context (login).
func (d *etcdDriver) Capabilities() driver.Caps {
	return driver.Caps{Name: "etcd", ReturnsAtContextEnd: true,
		Shared: driver.Yes, Permits: driver.Yes, Reentry: driver.Yes, Resume: driver.Yes,
		Notes: driver.Yes}
}

// As gives access to the client: a **clientv3.Client target is set to it
// (nil until the first call for a Locker opened from a URL).
func (d *etcdDriver) As(target any) bool {
	if p, ok := target.(**clientv3.Client); ok {
		d.cmu.Lock()
		*p = d.c
		d.cmu.Unlock()
		return true
	}
	return false
}

// MinTTL is the shortest TTL the driver accepts: etcd's leases last
// whole seconds.
const MinTTL = time.Second

// Validate refuses TTLs under a second. A TTL is rounded up to whole
// seconds for its lease, which lasts at least that long from the
// request: the validity is the TTL.
func (d *etcdDriver) Validate(l *driver.Lease) error {
	if d.err != nil {
		return d.err
	}
	if l.TTL < MinTTL {
		return fmt.Errorf("%w: etcd: TTL %v: etcd's leases last whole seconds, at least %v", driver.ErrInvalid, l.TTL, MinTTL)
	}
	return nil
}

// seconds is ttl rounded up to whole seconds: the lease TTL asked for.
func seconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// client returns the etcd client, making it at the first call for a
// Locker opened from a URL (lock.Open makes no connection). Such a
// client logs in through login, not clientv3's own.
func (d *etcdDriver) client() (*conn, error) {
	if d.err != nil {
		return nil, d.err
	}
	d.cmu.Lock()
	defer d.cmu.Unlock()
	if d.c == nil && d.cfg != nil {
		cfg := *d.cfg
		if cfg.Username != "" {
			d.login = newLogin(cfg.Username, cfg.Password)
			cfg.Username, cfg.Password = "", ""
			cfg.DialOptions = append(slices.Clip(cfg.DialOptions), d.login.dialOptions()...)
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("etcd: connecting: %w", err)
		}
		d.c = c
	}
	if d.c == nil {
		return nil, errors.New("etcd: no client")
	}
	if d.conn == nil {
		d.conn = newConn(d.c)
		d.w = newWatcher(d.c, d.login)
	}
	return d.conn, nil
}

// Close stops the watches, and closes the client if the Locker made it.
func (d *etcdDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	for _, h := range d.holders {
		h.timer.Stop()
	}
	d.mu.Unlock()
	d.cmu.Lock()
	defer d.cmu.Unlock()
	if d.w != nil {
		d.w.close()
	}
	d.dropSpares(d.conn)
	if d.owned && d.c != nil {
		return d.c.Close()
	}
	return nil
}

// ExpiryLag is how long after its TTL an expired grant may still be on
// the server: etcd's leader finds expired leases on a 500 ms tick, then
// commits their revocation, which deletes their keys. Until then the
// grant holds the key, and Inspect lists it.
const ExpiryLag = time.Second
