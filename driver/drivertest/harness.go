package drivertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Harness connects the suite to one backend: a driver's hookup implements
// it in a test file, and Run asks newHarness for a fresh one per subtest.
type Harness interface {
	// NewLocker returns a Locker with its own connection(s) to the backend,
	// as a separate process would have. The Locker owns them: its Close
	// closes them (the suite checks for leaked goroutines after Close). The
	// harness closes it at test cleanup if the test did not. Every field
	// of o that is set must reach the Locker, as lock.New(d, o) has it
	// (lock.OpenWith takes the TTL from the URL's ttl=, not from o).
	NewLocker(t *testing.T, o *lock.Options) *lock.Locker

	// Crash makes the process behind l die as far as the backend can tell:
	// its traffic stops and nothing is released. For session-bound backends
	// the session must end by timeout, not by a clean close.
	Crash(t *testing.T, l *lock.Locker)

	// DeleteKey deletes every grant of key behind the library's back.
	DeleteKey(ctx context.Context, key string) error
	// StealKey replaces the grant of key with one of a foreign owner.
	StealKey(ctx context.Context, key string) error
	// DeleteCounter deletes key's fencing counter, as a restart without
	// persistence or an eviction would. Not called unless
	// Caps.DeletableCounter.
	DeleteCounter(ctx context.Context, key string) error
	// Residue lists the backend state of key other than its fencing
	// counter (lock records, queue entries, nodes); empty when none.
	Residue(ctx context.Context, key string) ([]string, error)
	// Dump describes all the backend state of key, its fencing counter
	// included, in strings that change whenever it changes (names, values,
	// versions; not the time left to an expiry, which moves by itself),
	// for checks that a read-only call changed nothing.
	Dump(ctx context.Context, key string) ([]string, error)

	Caps() Caps
}

// Caps describe what a backend can do. The suite checks each flag against
// the Locker both ways where the Locker shows it (Shared, Resume, Reentry,
// Permits, Inspect: a flag set is used, a flag unset is checked to be
// refused). Notify, SessionBound and DeletableCounter cannot be seen from
// the Locker (see each); for those, the hookup's Skips (see Run) is the
// check: a flag turned off skips subtests the list does not name.
type Caps struct {
	// MinTTL is the shortest TTL the driver accepts; tests use it or more.
	MinTTL time.Duration
	// Notify: a waiter is told of a release (pub/sub, watches, queues) and
	// gets the key within a few round trips; without it, within the retry
	// strategy's cap. Not probed: lock.New hides whether its driver is a
	// driver.Notifier or Queuer, and a poll with DefaultRetry's 250 ms cap
	// is too close to a notification for timing to tell them apart on a
	// loaded machine. Set, it holds C10/WakeUp to the tighter bound and
	// Semaphore/FIFO to arrival order; unset, Semaphore/FIFO skips.
	Notify bool
	// SessionBound: grants live as long as a session (ZooKeeper), not a
	// TTL; SessionTimeout is then the liveness bound. Not probed apart
	// from the subtests it turns off: unset on a session-bound backend,
	// C3/GrantCarriesExpiry fails (the grant outlives its TTL); set on a
	// TTL backend, the subtests it skips are not on the hookup's Skips.
	SessionBound   bool
	SessionTimeout time.Duration
	// Shared: the Locker grants shared leases; unset, the suite checks
	// that RLock and Supports(lock.SharedLeases) refuse with
	// lock.ErrUnsupported.
	Shared bool
	// DeletableCounter: the fencing counter is a backend object that can be
	// lost (not so for ZooKeeper's czxid). Not probed: whether a backend
	// object can be lost is the harness's word (DeleteCounter); unset,
	// C5/FencingAfterCounterLoss skips.
	DeletableCounter bool
	// Resume: the driver resumes leases (lock's Resume and Detach); without
	// it, the suite checks that both are refused with ErrUnsupported.
	Resume bool
	// Reentry: the driver keeps hold counts for named owners
	// (lock.WithOwner); without it, the suite checks that WithOwner is
	// refused with ErrUnsupported.
	Reentry bool
	// Permits: the driver grants the permits of counting semaphores
	// (Locker.Acquire); without it, the suite checks that TryAcquire and
	// Supports(lock.Permits) refuse with lock.ErrUnsupported.
	Permits bool
	// Inspect says what Locker.Inspect tells on the backend; nil when the
	// driver cannot inspect keys, and the suite checks that lock.Inspect
	// refuses with ErrInvalid.
	Inspect *InspectCaps
	// Notes: the driver stores a grant's note (lock.WithNote) and Inspect
	// shows it; without it, the suite checks that Supports(lock.Notes) and
	// WithNote refuse with ErrUnsupported, and Inspect/Notes skips.
	Notes bool
	// Outage, when set, starts a server of the subtest's own that the
	// suite may stop and start again (see Outage), for the Outage/
	// subtests; nil (a backend without a server, a shared one), they
	// skip.
	Outage func(t *testing.T) *Outage
}

// ttl returns a short test TTL the driver accepts.
func (c Caps) ttl() time.Duration { return max(c.MinTTL, time.Second) }

// expiryBound is how long an abandoned grant may survive: its TTL, or the
// session timeout for session-bound backends.
func (c Caps) expiryBound(ttl time.Duration) time.Duration {
	if c.SessionBound {
		return c.SessionTimeout
	}
	return ttl
}

// validityBound is the most a grant of ttl may count on: its TTL, or for
// session-bound backends the session timeout, whatever the TTL (the
// session is only sure to last that long after a request).
func (c Caps) validityBound(ttl time.Duration) time.Duration {
	if c.SessionBound {
		return c.SessionTimeout
	}
	return ttl
}

var keySeq atomic.Int64

// key returns a key unique to this test run.
func key(t *testing.T) string {
	return fmt.Sprintf("dlock-conformance/%d/%s/%d", time.Now().UnixNano(), t.Name(), keySeq.Add(1))
}

// ctx returns a context bounded by d, cancelled at test cleanup.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// cancelled returns a context that is already cancelled: a call given it
// that does any I/O fails with context.Canceled.
func cancelled() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}

// mustLock locks key or fails the test.
func mustLock(t *testing.T, l *lock.Locker, k string, opts ...lock.Option) *lock.Lease {
	t.Helper()
	lease, err := l.Lock(ctx(t, 10*time.Second), k, opts...)
	if err != nil {
		t.Fatalf("Lock(%q): %v", k, err)
	}
	return lease
}

// closedWithin reports whether c is closed within d.
func closedWithin(c <-chan struct{}, d time.Duration) bool {
	select {
	case <-c:
		return true
	default:
	}
	select {
	case <-c:
		return true
	case <-time.After(d):
		return false
	}
}
