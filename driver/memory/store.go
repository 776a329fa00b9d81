package memory

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	qrule "github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/lock"
)

// A Store is the in-process backend that memory Lockers share, as a Redis
// server is shared by Redis Lockers. Lockers over one Store exclude each
// other; Lockers over different Stores do not. The zero Store is not ready;
// use NewStore.
type Store struct {
	mu       sync.Mutex
	keys     map[string]*queue
	counters map[string]uint64
	// floor is the largest counter the Store forgot (see forgetLocked):
	// a counter made again starts above it.
	floor uint64
	// sweep, when set, runs sweepNow at sweepAt, the earliest expiry of
	// a grant (see sweepByLocked); swept is when the last sweep ran.
	sweep          *time.Timer
	sweepAt, swept time.Time
	now            func() time.Time
}

// sweepGap is the least time between two sweeps of a Store.
const sweepGap = time.Second

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{keys: map[string]*queue{}, counters: map[string]uint64{}, now: time.Now}
}

// queue is one key: its holders and waiters in arrival order, granted by
// the rule of internal/queue.
type queue struct {
	entries []*entry
}

type entry struct {
	owner   string
	shared  bool
	limit   int // a permit's semaphore size; 0 for other entries
	granted bool
	expires time.Time       // for granted entries
	token   uint64          // for granted entries
	since   time.Time       // when a granted entry was granted (Inspect)
	joined  time.Time       // when a waiting entry joined the queue (Inspect)
	wake    chan<- struct{} // a waiting entry's, told of every change
	// holds, for a grant of a named owner (driver.Lease.Reentry), are its
	// holds' owner tokens; the grant ends when the last one is released.
	holds map[string]struct{}
	note  string // driver.Lease.Note of the attempt that made the entry
}

// holds reports whether owner holds e: it is one of a named grant's holds,
// or the owner of any other entry.
func (e *entry) heldBy(owner string) bool {
	if e.holds != nil {
		_, ok := e.holds[owner]
		return ok
	}
	return e.owner == owner
}

// grantable reports whether q.entries[i] is granted by the rule of
// internal/queue.
func (q *queue) grantable(i int) bool { return qrule.Granted(q.rule(), i) }

// rule is q's entries as internal/queue sees them.
func (q *queue) rule() []qrule.Entry {
	out := make([]qrule.Entry, len(q.entries))
	for i, e := range q.entries {
		out[i] = e.rule()
	}
	return out
}

func (e *entry) rule() qrule.Entry {
	switch {
	case e.limit > 0:
		return qrule.Entry{Kind: qrule.Permit, Limit: e.limit}
	case e.shared:
		return qrule.Entry{Kind: qrule.Shared}
	}
	return qrule.Entry{}
}

// limitConflict returns an error wrapping driver.ErrInvalid when l is a
// permit and the key's permits (granted or waiting) have another limit.
func (q *queue) limitConflict(l *driver.Lease) error {
	if l.Mode != driver.Permit {
		return nil
	}
	if n := qrule.Conflict(q.rule(), qrule.Entry{Kind: qrule.Permit, Limit: l.Limit}); n != 0 {
		return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrInvalid, n, l.Limit)
	}
	return nil
}

func (q *queue) find(owner string) int {
	return slices.IndexFunc(q.entries, func(e *entry) bool { return e.owner == owner })
}

// holder returns the index of the granted entry that owner holds, or -1.
func (q *queue) holder(owner string) int {
	return slices.IndexFunc(q.entries, func(e *entry) bool { return e.granted && e.heldBy(owner) })
}

// signal wakes every waiter of q.
func (q *queue) signal() {
	for _, e := range q.entries {
		if e.wake != nil {
			select {
			case e.wake <- struct{}{}:
			default:
			}
		}
	}
}

// queueLocked returns key's queue after dropping expired grants, creating
// it if create is set; nil if there is none.
func (s *Store) queueLocked(key string, create bool) *queue {
	q := s.keys[key]
	if q == nil {
		if !create {
			return nil
		}
		q = &queue{}
		s.keys[key] = q
	}
	q.dropExpired(s.now())
	return q
}

// dropExpired drops q's grants that expired by now, and wakes the waiters
// if there were any.
func (q *queue) dropExpired(now time.Time) {
	n := len(q.entries)
	q.entries = slices.DeleteFunc(q.entries, func(e *entry) bool { return e.granted && !now.Before(e.expires) })
	if len(q.entries) != n {
		q.signal()
	}
}

// sweepByLocked makes sure that a sweep runs at at, when a grant expires,
// or sweepGap after the last sweep if that is later: so a grant that
// expires unreleased on a key that no call touches again is dropped all
// the same, and keys used once do not pile up. A refresh only makes a
// grant expire later, after the sweep set for it, which then sets the
// next.
func (s *Store) sweepByLocked(at time.Time) {
	if s.sweep != nil && !at.Before(s.sweepAt) {
		return
	}
	at = later(at, s.swept.Add(sweepGap))
	if s.sweep != nil {
		s.sweep.Stop()
	}
	s.sweepAt = at
	s.sweep = time.AfterFunc(at.Sub(s.now()), s.sweepNow)
}

// sweepNow drops the expired grants of every key, forgets the keys left
// empty, and sets the next sweep at the earliest expiry left. A sweep
// costs one look at each key the Store keeps, at most once per sweepGap.
func (s *Store) sweepNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep, s.swept = nil, now
	var next time.Time
	for key, q := range s.keys {
		q.dropExpired(now)
		s.dropIfEmptyLocked(key, q)
		for _, e := range q.entries {
			if e.granted && (next.IsZero() || e.expires.Before(next)) {
				next = e.expires
			}
		}
	}
	if !next.IsZero() {
		s.sweepByLocked(next)
	}
}

// dropIfEmptyLocked forgets a key with no entries, its counter included,
// so that nothing is left behind (see forgetLocked).
func (s *Store) dropIfEmptyLocked(key string, q *queue) {
	if len(q.entries) == 0 {
		delete(s.keys, key)
		s.forgetLocked(key)
	}
}

// forgetLocked forgets key's fencing counter, raising s.floor to it: the
// next grant of key seeds a counter above every token the key was given.
func (s *Store) forgetLocked(key string) {
	if c, ok := s.counters[key]; ok {
		s.floor = max(s.floor, c)
		delete(s.counters, key)
	}
}

// nextTokenLocked increments key's fencing counter. A missing counter is
// seeded from the clock in microseconds, or from s.floor when that is
// larger (a counter the Store forgot), so tokens keep increasing after the
// counter is forgotten or lost.
func (s *Store) nextTokenLocked(key string) uint64 {
	c, ok := s.counters[key]
	if !ok {
		c = max(uint64(s.now().UnixMicro()), s.floor)
	}
	c++
	s.counters[key] = c
	return c
}

// The methods below tamper with the Store behind the Lockers' back, the way
// a test tampers with a real backend: they are for tests.

// DeleteKey deletes every grant and waiter of key.
func (s *Store) DeleteKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.keys[key]; q != nil {
		q.signal()
		q.entries = nil
		delete(s.keys, key)
	}
}

// StealKey replaces the grants of key with one exclusive grant of another
// owner, lasting ttl.
func (s *Store) StealKey(key string, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queueLocked(key, true)
	q.signal()
	q.entries = []*entry{{owner: "intruder", granted: true, since: s.now(), expires: s.now().Add(ttl)}}
	s.sweepByLocked(q.entries[0].expires)
}

// DeleteCounter deletes key's fencing counter, as a backend restart without
// persistence would.
func (s *Store) DeleteCounter(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.counters, key)
}

// Entries returns the owners of key's live grants and waiters, in order.
func (s *Store) Entries(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queueLocked(key, false)
	if q == nil {
		return nil
	}
	defer s.dropIfEmptyLocked(key, q)
	owners := make([]string, len(q.entries))
	for i, e := range q.entries {
		owners[i] = e.owner
	}
	return owners
}

// Dump describes everything s keeps of key, expired entries and the fencing
// counter included: one string per item, which changes whenever the item
// does (for checks that a call changed nothing). It drops nothing.
func (s *Store) Dump(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	if c, ok := s.counters[key]; ok {
		out = append(out, fmt.Sprintf("counter %d", c))
	}
	if q, ok := s.keys[key]; ok {
		out = append(out, fmt.Sprintf("queue of %d", len(q.entries)))
		for _, e := range q.entries {
			out = append(out, fmt.Sprintf("entry %s granted=%v shared=%v limit=%d token=%d expires=%d since=%d joined=%d holds=%q note=%q",
				e.owner, e.granted, e.shared, e.limit, e.token, e.expires.UnixNano(), e.since.UnixNano(), e.joined.UnixNano(), slices.Sorted(maps.Keys(e.holds)), e.note))
		}
	}
	return out
}

// Crash cuts l, a Locker over s, off from s, as the death of its process
// cuts a client off from a server: every later call of l's fails as a lost
// connection would, and nothing of l's is released. Its grants expire in s
// by their TTL, and its leases end by their deadlines, Done closing (its
// waiters alone leave the queue, as a dead waiter's entry expires on the
// network backends). It returns an error wrapping lock.ErrInvalid when l is
// not a Locker over s.
func (s *Store) Crash(l *lock.Locker) error {
	var d *memDriver
	if !l.As(&d) || d.s != s {
		return fmt.Errorf("%w: memory: Crash: not a Locker over this Store", lock.ErrInvalid)
	}
	d.cut.Store(true)
	return nil
}
