// Package memory is dlock's in-process reference driver: the lock
// algorithm without a network, for examples, for the unit tests of programs
// that use dlock, and as the model the other drivers are checked against.
//
// Lockers made with New over the same *Store exclude each other, like
// processes sharing one Redis server. A Store honours TTLs (a grant expires
// unless refreshed), hands out strictly increasing fencing tokens (seeded
// from the clock in microseconds when the counter is lost, like the network
// drivers), and queues waiters in arrival order: a release or an expiry
// wakes the next waiter at once, without polling and without a thundering
// herd. Shared (read) leases are supported (RLock, TryRLock);
// a writer waits for the readers before it, and readers that arrive after a
// waiting writer wait for it. Locker.Inspect tells everything a Store keeps:
// every holder's token, time left and grant time, and every waiter's
// arrival.
//
// A key used once leaves nothing in its Store: a key with no grant and no
// waiter is forgotten with its counter (the next grant's token is still
// higher: the Store keeps the largest counter it forgot, one number for
// all keys), and a grant that expired unreleased on a key no call touches
// again is dropped when it expires (at most a second after the Store's
// previous sweep of expired grants).
//
// A Store's DeleteKey, StealKey, DeleteCounter and Crash do behind its
// Lockers' back what an operator, an eviction, a restart or a process's
// death does to a server: for tests of a program's lost-lease paths. With
// Entries and Dump they are all the conformance suite's hookup needs
// (conformance_test.go, the worked example of driver/drivertest).
//
// # URLs
//
//	memory://        the process-wide default Store
//	memory://NAME    a process-wide Store named NAME, made on first use
//
// plus the query parameters every scheme accepts (see lock.Open).
//
// # As
//
// lock.As gives access to the Store: a *Store target is set to it.
//
//	var s *memory.Store
//	if locker.As(&s) { ... }
package memory

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redact"
	"github.com/dlock-go/dlock/lock"
)

// Scheme is the URL scheme this package registers with lock.Open.
const Scheme = "memory"

func init() { lock.Register(Scheme, open) }

var stores = struct {
	sync.Mutex
	m map[string]*Store
}{m: map[string]*Store{}}

func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	o, _, err := lock.URLOptions(u)
	if err != nil {
		return nil, nil, err
	}
	if u.Opaque != "" || u.Path != "" || u.User != nil || u.Port() != "" {
		return nil, nil, fmt.Errorf("%w: memory URL %s: want memory:// or memory://NAME", lock.ErrInvalid, errtext.Quote(redact.URL(u)))
	}
	stores.Lock()
	s := stores.m[u.Host]
	if s == nil {
		s = NewStore()
		stores.m[u.Host] = s
	}
	stores.Unlock()
	return &memDriver{s: s}, o, nil
}

// New returns a Locker over s. Its Close releases its leases and leaves s
// as it is.
func New(s *Store, o *lock.Options) *lock.Locker {
	return lock.New(&memDriver{s: s}, o)
}

// memDriver is one Locker's connection to its Store.
type memDriver struct {
	s   *Store
	cut atomic.Bool // set by Store.Crash: every call but Leave fails
}

// errCut is what a call of a crashed Locker's driver returns: a backend
// failure, as a lost connection's, so the outcome of a grant is unknown.
var errCut = errors.New("memory: connection lost (the Locker was crashed by Store.Crash)")

// alive returns the error a call starting now fails with, if any: ctx's,
// or errCut once the Locker was crashed.
func (d *memDriver) alive(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.cut.Load() {
		return errCut
	}
	return nil
}

// Capabilities implements driver.Capable: a Store does everything, and its
// calls return by their context's end (none waits, but for the Store's
// mutex). A Store keeps permits as entries of the key's queue, a named
// grant its holds, and its grants can be resumed by any Locker over the
// same Store. An entry keeps its attempt's note.
func (d *memDriver) Capabilities() driver.Caps {
	return driver.Caps{Name: "memory", ReturnsAtContextEnd: true,
		Shared: driver.Yes, Permits: driver.Yes, Reentry: driver.Yes, Resume: driver.Yes, Notes: driver.Yes}
}

func (d *memDriver) As(target any) bool {
	switch p := target.(type) {
	case **Store: // l.As(&store) passes a **Store
		*p = d.s
		return true
	case **memDriver: // Store.Crash's
		*p = d
		return true
	}
	return false
}

func (d *memDriver) Validate(l *driver.Lease) error { return nil }

func (d *memDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	if err := d.alive(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queueLocked(l.Key, true)
	if l.Reentry {
		// A re-entry: the key's grant is a named one of the same owner.
		if j := slices.IndexFunc(q.entries, func(e *entry) bool {
			return e.granted && e.holds != nil && driver.SameOwner(e.owner, l.Owner)
		}); j >= 0 {
			e := q.entries[j]
			e.holds[l.Owner] = struct{}{}
			e.expires = later(e.expires, s.now().Add(l.TTL))
			l.Token, l.Validity = e.token, l.TTL
			return nil
		}
	}
	if err := q.limitConflict(l); err != nil {
		s.dropIfEmptyLocked(l.Key, q)
		return err
	}
	q.entries = append(q.entries, newEntry(l, nil))
	i := len(q.entries) - 1
	if !q.grantable(i) {
		q.entries = q.entries[:i]
		s.dropIfEmptyLocked(l.Key, q)
		return &driver.HeldError{RetryAfter: d.untilFree(q)}
	}
	d.grantLocked(l, q.entries[i])
	return nil
}

func newEntry(l *driver.Lease, wake chan<- struct{}) *entry {
	e := &entry{owner: l.Owner, shared: l.Mode == driver.Shared, wake: wake, note: l.Note}
	if l.Mode == driver.Permit {
		e.limit = l.Limit
	}
	return e
}

// untilFree is the time until the earliest grant of q expires.
func (d *memDriver) untilFree(q *queue) time.Duration {
	var first time.Time
	for _, e := range q.entries {
		if e.granted && (first.IsZero() || e.expires.Before(first)) {
			first = e.expires
		}
	}
	if first.IsZero() {
		return 0
	}
	return max(first.Sub(d.s.now()), time.Millisecond)
}

func (d *memDriver) grantLocked(l *driver.Lease, e *entry) {
	if l.Reentry {
		e.holds = map[string]struct{}{l.Owner: {}}
	}
	e.granted = true
	e.since = d.s.now()
	e.expires = e.since.Add(l.TTL)
	d.s.sweepByLocked(e.expires)
	l.Token = d.s.nextTokenLocked(l.Key)
	e.token = l.Token
	l.Validity = l.TTL
}

// Join implements driver.Queuer: l's entry goes at the end of the key's
// queue, and is granted when nothing before it blocks it.
func (d *memDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	if err := d.alive(ctx); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	q := d.s.queueLocked(l.Key, true)
	if err := q.limitConflict(l); err != nil {
		d.s.dropIfEmptyLocked(l.Key, q)
		return err
	}
	e := newEntry(l, wake)
	e.joined = d.s.now()
	l.Data = e
	q.entries = append(q.entries, e)
	return d.turnLocked(l, q)
}

// Check implements driver.Queuer. An entry removed behind the waiter's
// back (DeleteKey) joins again, at the end.
func (d *memDriver) Check(ctx context.Context, l *driver.Lease) error {
	if err := d.alive(ctx); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	q := d.s.queueLocked(l.Key, true)
	if q.find(l.Owner) < 0 {
		if err := q.limitConflict(l); err != nil {
			d.s.dropIfEmptyLocked(l.Key, q)
			return err
		}
		e := l.Data.(*entry)
		e.joined = d.s.now()
		q.entries = append(q.entries, e)
	}
	return d.turnLocked(l, q)
}

func (d *memDriver) turnLocked(l *driver.Lease, q *queue) error {
	i := q.find(l.Owner)
	if !q.grantable(i) {
		return &driver.HeldError{RetryAfter: d.untilFree(q)}
	}
	q.entries[i].wake = nil
	d.grantLocked(l, q.entries[i])
	return nil
}

// Leave implements driver.Queuer. It goes through even after Store.Crash:
// a dead process's queue entry dies on the network backends, and a Store
// has no entry expiry of its own.
func (d *memDriver) Leave(ctx context.Context, l *driver.Lease) error {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	d.removeLocked(l.Key, l.Owner)
	return nil
}

// removeLocked deletes owner's entry of key and reports whether there was
// one.
func (d *memDriver) removeLocked(key, owner string) bool {
	q := d.s.queueLocked(key, false)
	if q == nil {
		return false
	}
	defer d.s.dropIfEmptyLocked(key, q)
	i := q.find(owner)
	if i < 0 {
		return false
	}
	q.entries = append(q.entries[:i], q.entries[i+1:]...)
	q.signal()
	return true
}

func (d *memDriver) Release(ctx context.Context, l *driver.Lease) error {
	if err := d.alive(ctx); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if l.Reentry {
		return d.releaseHoldLocked(l)
	}
	if !d.removeLocked(l.Key, l.Owner) {
		return driver.ErrNotHeld
	}
	return nil
}

// releaseHoldLocked ends l's hold of its named owner's grant, and the grant
// with its last hold.
func (d *memDriver) releaseHoldLocked(l *driver.Lease) error {
	q := d.s.queueLocked(l.Key, false)
	if q == nil {
		return driver.ErrNotHeld
	}
	defer d.s.dropIfEmptyLocked(l.Key, q)
	i := q.holder(l.Owner)
	if i < 0 {
		return driver.ErrNotHeld
	}
	e := q.entries[i]
	delete(e.holds, l.Owner)
	if len(e.holds) == 0 {
		q.entries = slices.Delete(q.entries, i, i+1)
		q.signal()
	}
	return nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Refresh extends the grant of l.Owner on l.Key to at least ttl from now.
func (d *memDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	if err := d.alive(ctx); err != nil {
		return 0, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queueLocked(l.Key, false)
	if q == nil {
		return 0, driver.ErrNotHeld
	}
	defer s.dropIfEmptyLocked(l.Key, q)
	i := q.holder(l.Owner)
	if i < 0 {
		return 0, driver.ErrNotHeld
	}
	// Never shorten the grant: other holds of a named owner, and another
	// Lease of the grant (one that resumed it, or whose handle was
	// resumed), count on its expiry.
	e := q.entries[i]
	e.expires = later(e.expires, s.now().Add(ttl))
	return ttl, nil
}

// Resume implements driver.Resumer: it extends the grant of l.Owner on
// l.Key to at least l.TTL from now if it has l's mode and token, never
// shortening it: the Lease whose handle is resumed counts on its expiry.
func (d *memDriver) Resume(ctx context.Context, l *driver.Lease) error {
	if err := d.alive(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queueLocked(l.Key, false)
	if q == nil {
		return driver.ErrNotHeld
	}
	defer s.dropIfEmptyLocked(l.Key, q)
	i := q.holder(l.Owner)
	if i < 0 {
		return driver.ErrNotHeld
	}
	e := q.entries[i]
	if e.token != l.Token || e.shared != (l.Mode == driver.Shared) || e.limit != l.Limit || (e.holds != nil) != l.Reentry {
		return driver.ErrNotHeld
	}
	e.expires = later(e.expires, s.now().Add(l.TTL))
	l.Validity = l.TTL
	return nil
}

func (d *memDriver) Close() error { return nil }
