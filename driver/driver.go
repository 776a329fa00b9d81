// Package driver defines the interface that dlock backends implement.
//
// Users never import this package: they hold a *lock.Locker and
// *lock.Lease. A backend implements Driver (single attempts at grant,
// release and refresh), declares what else it does in one place, its
// Capabilities (shared leases, permits, re-entry, resuming, and whether its
// calls return when their context ends), and implements the optional
// interfaces below where its backend allows; package lock detects those by
// type assertion:
//
//   - Capable: what the driver does beyond exclusive leases, each "no" with
//     its reason, and its name.
//   - Notifier: the backend can tell waiters that a key was released
//     (Redis pub/sub), so lock retries at once instead of polling.
//   - Queuer: the backend queues waiters itself (ZooKeeper sequential nodes,
//     the Redis drivers' queues, the memory store): lock runs the wait and
//     the driver offers its steps (join, check, leave), unless the caller
//     gave a retry strategy.
//   - BatchRefresher: many leases can be refreshed in one round trip.
//   - Resumer: a grant made through another Locker can be taken over.
//   - Inspector: the backend can be asked who holds a key and who waits
//     for it, without changing anything (lock's Locker.Inspect).
//   - LogSetter: the driver's own clients log through their library;
//     lock.New hands it the Locker's Options.Logger for those lines.
//   - Aser: the driver exposes what it is built on (lock's Locker.As).
//
// Everything that is the same for every backend lives in lock, not here:
// validation common to all backends, retries and backoff, the renewal
// scheduler, the local validity deadline, Done channels, Close bookkeeping
// and error wrapping. A driver never retries a held key, never sleeps to
// wait for a key, and never starts a goroutine per lease; it may repeat a
// step its backend lost to a race of its own (an aborted transaction, a
// lost cas), a bounded number of times.
//
// # Errors
//
// Drivers report outcomes with the sentinels of this package, checked with
// errors.Is: ErrHeld (the key is held by someone else; wrap it in a
// *HeldError to pass a retry hint), ErrNotHeld (the caller's grant is gone)
// and ErrInvalid (the input cannot be carried by this backend), and mark
// the errors that say the backend is unreachable with ErrUnavailable
// (Unavailable, MarkNetFailure): lock waits through those in a waiting
// call, and reports them as such in the others. Any other error is a
// backend failure (a refusal, a server error) that ends a waiting call;
// lock wraps it with the key.
// Context errors are returned as they are (possibly wrapped), never hidden.
//
// # Lifetimes
//
// A Lease's validity is bounded by Validity, counted from the start of the
// call that granted or refreshed it. Backends whose grants live as long as a
// session (ZooKeeper) report as Validity what is left of the session
// timeout after the last moment the server surely heard from the session,
// and implement Refresh as a check that the grant still exists; they also
// call Lease.Lost as soon as they learn the session or the grant is gone.
// lock needs no other special case for them.
//
// # Proving a driver
//
// Package driver/drivertest is the conformance suite every driver of this
// module passes, and that a driver written elsewhere runs with a hookup of
// its own test file; docs/design.md, "Writing a driver", walks through the
// memory driver as the worked example.
package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/errtext"
)

// Sentinel errors for drivers; package lock maps them to its own.
var (
	// ErrHeld: the key is held by another owner; the attempt changed nothing.
	ErrHeld = errors.New("driver: key is held")
	// ErrNotHeld: the caller's grant does not exist any more (expired,
	// released, deleted or taken by another owner). Nothing was changed.
	ErrNotHeld = errors.New("driver: lease not held")
	// ErrInvalid: the input cannot be used with this backend.
	ErrInvalid = errors.New("driver: invalid input")
	// ErrUnavailable: the backend could not be reached, or stopped
	// answering: a connection refused, lost or timed out, no server or
	// session to send to. The outcome of the call is unknown (a request
	// may have been applied before its connection failed). Wrap it with
	// the client's error, as Unavailable does.
	ErrUnavailable = errors.New("driver: backend unavailable")
)

// Unavailable returns err marked as ErrUnavailable (errors.Is sees both),
// or nil for nil. A driver marks with it the errors of its client that
// mean the backend is unreachable and that NetFailure does not recognise.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// MarkNetFailure returns err marked as ErrUnavailable when NetFailure(err),
// and err as it is otherwise: a driver passes its client's errors through
// it where they leave the driver.
func MarkNetFailure(err error) error {
	if NetFailure(err) {
		return Unavailable(err)
	}
	return err
}

// NetFailure reports whether err is a failure of the network between
// client and server, as the standard library reports them: a dial, read
// or write error (*net.OpError, *net.DNSError), a connection refused,
// reset or broken, a read or write timeout, or a connection closed by the
// server (io.EOF, io.ErrUnexpectedEOF). A context's end is not one: the
// caller's context says why.
func NetFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var (
		op  *net.OpError
		dns *net.DNSError
	)
	return errors.As(err, &op) || errors.As(err, &dns) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// HeldError is an ErrHeld carrying the driver's knowledge of when the key
// may become free (for example the holder's remaining PTTL).
type HeldError struct {
	// RetryAfter is the time after which an attempt may succeed; zero when
	// unknown.
	RetryAfter time.Duration
}

func (e *HeldError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v (free in at most %v)", ErrHeld, errtext.Ceil(e.RetryAfter))
	}
	return ErrHeld.Error()
}

// Is makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// LogSetter routes the log lines of a driver's own clients (those it
// built, from a URL). If a Driver does not implement LogSetter, its
// clients log wherever their library does by default.
type LogSetter interface {
	// SetLogger is called by lock.New, before the Locker's first call, with
	// the Locker's Options.Logger (nil when none): those lines go there or
	// nowhere, never to the program's stderr.
	SetLogger(l *slog.Logger)
}

// Mode is the kind of grant asked for.
type Mode uint8

const (
	// Exclusive grants exclude every other grant of the key.
	Exclusive Mode = iota
	// Shared grants coexist with other Shared grants and exclude Exclusive
	// ones. Only drivers whose Caps.Shared is OK are asked for them.
	Shared
	// Permit grants are the permits of a counting semaphore. Only drivers
	// whose Caps.Permits is OK are asked for them. For a Permit lease l:
	//
	//   - Acquire, and the Queuer's steps, grant l when fewer than l.Limit
	//     permits of the key are live and no other kind of grant holds it;
	//     each permit expires on its own (a crashed holder's returns within
	//     its TTL), and every permit takes a fencing token from the key's
	//     one counter, so tokens increase across all grants of the key. A
	//     key whose permits were granted with another Limit is refused with
	//     ErrInvalid. Where the driver queues, waiters are served in
	//     arrival order: a permit waiter does not pass an earlier waiter of
	//     any kind.
	//   - Release, Refresh and Resume act on l.Owner's permit alone.
	//   - While any permit is live the key is held for every Exclusive and
	//     Shared attempt, and, on Redis, for plain SET NX locks of the same
	//     key.
	Permit
)

func (m Mode) String() string {
	switch m {
	case Shared:
		return "shared"
	case Permit:
		return "permit"
	}
	return "exclusive"
}

// Lease is one grant, or one attempt at a grant, as the driver sees it.
//
// Package lock creates it, fills Key, Owner, Mode, TTL and Lost, and passes
// the same pointer to every call about this grant. The driver fills Token,
// Validity and Data during the call that grants it; after that call
// returns, both sides only read the Lease, so no locking is needed on
// either side.
type Lease struct {
	// Key is the user's key, already checked by lock: non-empty, valid
	// UTF-8, at most lock's maximum length. The driver maps it to backend
	// names (prefix, hashing, escaping) without collisions.
	Key string
	// Owner is unique per attempt: 32 lowercase hex digits. Backends store
	// it as the grant's value to check ownership on release and refresh.
	Owner string
	// Mode is Exclusive, or what the driver's Caps allow.
	Mode Mode
	// Reentry is set only for drivers whose Caps.Reentry is OK, on an
	// exclusive attempt of a named owner (lock.WithOwner). Owner's first
	// NamedOwnerLen hex digits then name the owner, the same for all of its
	// attempts; the rest are unique to the attempt, which is one hold. For
	// such a lease:
	//
	//   - Acquire grants l also when the key is granted exclusively to a
	//     hold of the same named owner that itself had Reentry set (a
	//     re-entry): it adds l.Owner to the grant's holds, extends the
	//     grant to at least l.TTL from now (never shortening it: the other
	//     holds count on their own deadlines) and sets l.Token to the
	//     grant's token. A first grant records l.Owner as its only hold,
	//     and forgets the holds of any earlier grant. The holds live and
	//     expire with the grant.
	//   - Release removes l.Owner from the holds, and deletes the grant
	//     (and hands it on, as for any release) only when no hold is left.
	//     It returns ErrNotHeld when l.Owner is not a hold of the key's
	//     grant. After a grant whose reply was lost, it removes that hold
	//     alone.
	//   - Refresh and Resume extend the grant, never shortening it, if
	//     l.Owner is one of its holds (Resume: with l.Token), and return
	//     ErrNotHeld otherwise.
	//
	// lock never puts such a lease in a Queuer's queue: named owners wait
	// by their retry strategy.
	Reentry bool
	// Limit is, for a Permit, the number of permits of the key's
	// semaphore (1 to lock's MaxPermits); zero otherwise. All holders of a
	// key's permits give the same Limit: an attempt whose Limit differs
	// from the one the key's permits were granted with fails with an error
	// wrapping ErrInvalid that says both, and changes nothing.
	Limit int
	// TTL is the requested lease time.
	TTL time.Duration
	// Lost, when set, may be called by the driver from any goroutine when it
	// learns, outside a call from lock, that the grant is gone (session
	// expiry, a watch firing). Calling it more than once is harmless. It must
	// not block.
	Lost func(error)
	// Note is a short text stored with the grant (lock.WithNote: an
	// election's announcement), set only for drivers whose Caps.Notes is
	// OK: at most MaxNoteLen bytes of printable UTF-8, checked by lock.
	// Acquire and the Queuer's granting step store it with the grant in
	// the same atomic step that grants it, and Inspect reports it as the
	// Holder's Note for as long as the grant lives; a re-entry keeps the
	// note of the grant's first hold. Refresh and Resume leave the stored
	// note as it is (a resumed Lease's Note is empty). Empty: no note.
	Note string

	// Token is the fencing token: strictly increasing per key across grants.
	Token uint64
	// Validity is how long after the start of the call that granted it
	// the grant is sure to last: TTL as applied by the backend (rounded,
	// for instance), or the session timeout for session-bound backends.
	// lock counts it from the moment it made that call, and applies the
	// drift margin; a driver does neither.
	Validity time.Duration
	// Data is the driver's own state for this grant (a node path, say).
	Data any
}

// Driver is the interface a backend implements. Its methods make single
// attempts: they never retry and never wait for a key to become free. All
// methods are safe for concurrent use. After Close, lock makes no more calls.
type Driver interface {
	// Validate checks l.Key, l.TTL and l.Mode for what this backend can
	// carry, before any I/O. Failures wrap ErrInvalid and say why.
	//
	// A driver whose grants and refreshes of l.TTL are sure to last less
	// than l.TTL after their request was sent (whole-second clocks, a
	// session timeout shorter than the TTL) sets l.Validity to what they
	// are sure to last; zero means l.TTL. lock relies on it before a
	// refresh is sent: the refresh's reply may be lost after the backend
	// applied it, so the lease's deadline must already count on no more.
	Validate(l *Lease) error

	// Acquire makes one attempt to grant l. On success it sets l.Token,
	// l.Validity and l.Data and returns nil. When the key is held by another
	// owner it returns an error wrapping ErrHeld (a *HeldError when it knows
	// more) and leaves no state behind.
	//
	// When Acquire fails otherwise (ctx ended, reply lost), the outcome is
	// unknown; lock then calls Release with the same l, which must remove a
	// grant that was applied without the caller learning it.
	Acquire(ctx context.Context, l *Lease) error

	// Release deletes the grant of l.Owner on l.Key, and only that grant, in
	// one atomic step. It returns ErrNotHeld when there is no such grant.
	// Release must also work for an l whose Acquire failed with an unknown
	// outcome (l.Token and l.Data unset): it then finds the grant by l.Owner.
	Release(ctx context.Context, l *Lease) error

	// Refresh extends the grant of l.Owner on l.Key to at least ttl from
	// now, and only that grant, and returns the validity applied (as
	// Lease.Validity for a grant). It never shortens any expiry it touches
	// (the grant's, a share's or permit's, a hold's): the grant may be held
	// by two Leases (one resumed it, see Resumer) with different TTLs, and
	// the refresh of the shorter one must not cut short what the other's
	// deadline counts on. It returns ErrNotHeld when there is no such
	// grant; nothing else is then changed. Refresh must not modify l: lock
	// may run two refreshes of one lease at once.
	Refresh(ctx context.Context, l *Lease, ttl time.Duration) (validity time.Duration, err error)

	// Close releases the driver's own resources (subscriptions, background
	// goroutines, and the client if the driver opened it). Grants still held
	// are released by lock before Close.
	Close() error
}

// Notifier tells waiters when a key is released (Redis pub/sub). If a
// Driver does not implement Notifier, a waiting Lock polls by its retry
// strategy alone. lock subscribes before retrying a held key, so a
// release between the failed attempt and the wait is not missed.
type Notifier interface {
	// Subscribe registers interest in releases of key. The returned channel
	// receives a value (it is buffered; sends never block) each time a
	// release of key is observed; cancel unsubscribes and must be called.
	// Implementations share one backend subscription between all waiters.
	Subscribe(ctx context.Context, key string) (c <-chan struct{}, cancel func(), err error)
}

// DriftMargin is what lock subtracts from a validity to get a lease's
// local deadline: 1% of the validity for clock-rate drift between client
// and server, plus 2 ms for timer and scheduling delays. A driver that ends
// leases on its own clock (ZooKeeper's session monitor) uses the same.
func DriftMargin(validity time.Duration) time.Duration {
	return validity/100 + 2*time.Millisecond
}

// Heartbeat is the longest lock lets a waiting lease go without a Queuer
// step: queue entries that the backend expires by themselves (a Redis
// waiter's) must outlive several heartbeats.
const Heartbeat = time.Second

// Queuer queues waiters in the backend (ZooKeeper sequential nodes, the
// Redis drivers' queues, the memory store). If a Driver does not implement
// Queuer, a waiting Lock makes attempts by its retry strategy, and waiters
// are served in no particular order.
//
// For a blocking Lock without an explicit retry strategy, lock runs the
// wait and the driver offers single steps: lock calls Join once, then Check when
// the driver signals wake, when a HeldError's RetryAfter has passed, and
// at least every Heartbeat, until a step grants the lease (returns nil).
// If the wait ends otherwise (the context, a failure), lock calls Leave,
// exactly once, after the last step has returned; after a grant it never
// does. Steps of one lease are made one at a time.
//
// A step returns nil when it granted l (filled as by Acquire), a
// *HeldError while l waits (RetryAfter, when set, says when to Check at
// the latest), or another error when the wait failed. A backend failure
// that the waiter should ride out (a connection lost while the queue
// entry survives) is reported as a HeldError. A step does not wait for a
// key; the one wait a step may make is for its own request's outcome
// (ZooKeeper's create, whose lost reply must be resolved before another
// node is made for the same attempt), and it ends when ctx does.
type Queuer interface {
	// Join makes an attempt at l's key and, if it is held, puts l in the
	// key's queue. Until the wait ends, the driver sends on wake (without
	// blocking: wake is buffered) whenever l's turn may have come.
	Join(ctx context.Context, l *Lease, wake chan<- struct{}) error
	// Check finds out whether l's turn has come and takes the key if so,
	// and keeps l's place in the queue alive.
	Check(ctx context.Context, l *Lease) error
	// Leave ends a wait that did not get the key: it takes l out of the
	// queue, removes a grant that a step whose reply was lost may have
	// made, and stops sending on wake. lock calls it in the background,
	// bounded by ctx, and again after a failure until its TTL has passed;
	// a call that outlived its ctx may still run then, so two calls may
	// overlap and must both be harmless.
	Leave(ctx context.Context, l *Lease) error
}

// BatchRefresher refreshes many leases in fewer round trips than one per
// lease. If a Driver does not implement BatchRefresher, lock renews each
// lease with its own Refresh call.
type BatchRefresher interface {
	// RefreshBatch refreshes every lease in ls to ttl, as Refresh would
	// (never shortening a grant). It
	// returns the validity applied to the successful ones and one error per
	// lease (nil for success), in order.
	RefreshBatch(ctx context.Context, ls []*Lease, ttl time.Duration) (validity time.Duration, errs []error)
}

// IsOwner reports whether s is an owner token as lock makes them (the
// Owner of every Lease it passes to a driver): 32 lowercase hex digits.
func IsOwner(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NamedOwnerLen is how many leading hex digits of a Reentry lease's
// Owner name its owner.
const NamedOwnerLen = 16

// SameOwner reports whether owner tokens a and b are attempts of one named
// owner (their first NamedOwnerLen digits agree). Anonymous owners are
// random throughout, so two of them agree by chance with probability 2^-64.
func SameOwner(a, b string) bool {
	return len(a) >= NamedOwnerLen && len(b) >= NamedOwnerLen && a[:NamedOwnerLen] == b[:NamedOwnerLen]
}

// Capable declares what a driver does beyond exclusive leases. If a
// Driver does not implement Capable, lock asks it for exclusive leases
// only and refuses the rest ("does not declare"), names it after its
// type's package, and runs its calls on goroutines of its own.
type Capable interface {
	// Capabilities is called once, by lock.New, and makes no I/O.
	Capabilities() Caps
}

// Caps is what a driver says it does (Capable). Its zero value claims
// nothing beyond exclusive leases.
type Caps struct {
	// Name names the driver in metrics (dlock.driver), logs and refusals:
	// "redisnx", say.
	Name string
	// ReturnsAtContextEnd: every call returns by its context's end on its
	// own, because the client stops a request when its context is
	// cancelled or its deadline passes (pgx), or no call waits on I/O (the
	// in-process store). lock then makes the driver's calls on the
	// caller's goroutine; it hands every other driver's calls to a
	// goroutine of its own, so that the caller can return at its
	// context's end while the call goes on (go-redis honours deadlines
	// only, gomemcache and go-zookeeper take no context).
	ReturnsAtContextEnd bool
	// Shared: the driver grants Shared leases (lock's RLock, TryRLock).
	Shared Support
	// Permits: the driver grants Permit leases, the permits of counting
	// semaphores (lock's Acquire, TryAcquire); see Permit.
	Permits Support
	// Reentry: the driver keeps holds for named owners, whose exclusive
	// leases come with Lease.Reentry set; see there.
	Reentry Support
	// Resume: the driver takes over grants made through another Locker
	// (lock's Resume); it then implements Resumer.
	Resume Support
	// Notes: the driver stores Lease.Note with a grant and reports it in
	// Holder.Note (it then implements Inspector). Without it, lock refuses
	// lock.WithNote with the reason given here, and an election can be
	// campaigned for but not observed.
	Notes Support
}

// MaxNoteLen is the longest Lease.Note, in bytes.
const MaxNoteLen = 256

// Support says whether a driver does one thing (Caps), and if not, why.
type Support struct {
	// OK: the driver does it.
	OK bool
	// Why is, when not OK, the reason, as a user should read it, naming
	// the backend: "memcached grants no semaphore permits: ...".
	Why string
}

// Yes is the Support of a thing the driver does.
var Yes = Support{OK: true}

// No is the Support of a thing the driver does not do, and why.
func No(why string) Support { return Support{Why: why} }

// Resumer takes over a grant made through another Locker, in this process
// or another (lock's Locker.Resume, Lease.Detach). If a Driver does not
// implement Resumer, or its Caps.Resume is not OK, lock refuses Resume and
// Detach with the reason.
type Resumer interface {
	// Resume checks that l.Key is granted to l.Owner, in mode l.Mode, with
	// fencing token l.Token as far as the backend can tell, and extends
	// that grant to at least l.TTL from now, never shortening any expiry
	// it touches (the grant's, a share's or permit's, a hold's): the Lease
	// whose handle is resumed counts on them, and a Resume applied after
	// its caller gave up must leave the grant no shorter. It sets
	// l.Validity and l.Data as Acquire does. It returns ErrNotHeld when
	// there is no such grant, and changes nothing. A failed Resume leaves
	// nothing to clean up: the grant stays its first holder's, at most
	// extended.
	Resume(ctx context.Context, l *Lease) error
}

// Aser exposes what a driver is built on, such as its backend client.
// If a Driver does not implement Aser, lock's Locker.As reports false for
// every target.
type Aser interface {
	// As sets target, a pointer, to what the driver is built on when
	// target's type is one the driver documents under "As" in its package
	// doc, and reports whether it did.
	As(target any) bool
}

// Inspector says who holds a key and who waits for it (lock's
// Locker.Inspect). If a Driver does not implement Inspector, lock refuses
// Inspect with lock.ErrUnsupported and says so.
//
// Inspect reads the backend and changes nothing on it: no grant, queue
// entry, counter, expiry or watch is made, moved or deleted, and nothing
// expired is cleaned up on the way (a script or transaction that only
// reads, a listing and stats). Its result is a snapshot as of one moment
// where the backend allows one (one script, one transaction), and
// otherwise as of the reads it made, which may straddle a change. lock has
// checked key as for a Lock (non-empty, valid UTF-8, at most lock's
// maximum length) and called Validate with an exclusive lease of key; the
// driver maps key to its backend names as for a grant.
//
// It returns the key's live holders, in grant order where the backend
// tells it, and its live waiters in the order they will be served, each
// with what the backend can tell cheaply; a field the driver cannot fill
// stays zero and KeyState.Unknown says which. Expired grants and dead
// queue entries (those the driver itself skips) are left out. A key that
// nobody holds or waits for gives an empty KeyState and no error. Failures
// are backend errors (or wrap ErrInvalid for a key or configuration the
// backend cannot carry), returned as by the other calls.
type Inspector interface {
	Inspect(ctx context.Context, key string) (KeyState, error)
}

// MaxInspectWaiters is the most waiters an Inspect lists: a longer queue
// sets KeyState.MoreWaiters. It bounds the work a server does for one
// Inspect (a Redis script, a ZooKeeper node's children).
const MaxInspectWaiters = 1000

// KeyState is what Inspect found of a key.
type KeyState struct {
	// Holders are the key's live grants: one for an exclusive grant (a
	// named owner's included, however many holds it has), one per reader
	// or permit.
	Holders []Holder
	// Waiters are the live waiters queued by the backend, first in line
	// first. Only drivers whose backend keeps a queue list any (see
	// Unknown.Waiters); waiters that poll (memcached's, and Lock calls
	// with an explicit retry strategy on any backend) are not queued, so
	// not listed.
	Waiters []Waiter
	// MoreWaiters: the queue is longer than the MaxInspectWaiters listed.
	MoreWaiters bool
	// Unknown says what the driver could not tell about this key.
	Unknown Unknown
}

// Holder is one live grant of a key.
type Holder struct {
	// Owner is the grant's owner token (32 lowercase hex digits): for a
	// named owner's grant, the token of one of its holds, whose first
	// NamedOwnerLen digits name the owner. For a Foreign grant, what the
	// backend has in its place (a plain SET NX lock's value, a lock node's
	// name).
	Owner string
	// Foreign: a grant that no dlock driver made: a plain SET NX lock on
	// Redis (redsync, redislock), a zk.Lock or Curator node on ZooKeeper.
	// Mode is then how the driver's grant rules read it: Exclusive, the
	// safe reading of a lock whose recipe is unknown.
	Foreign bool
	Mode    Mode
	// Limit is a Permit's semaphore size; zero for other modes.
	Limit int
	// Holds is how many holds a named owner's grant has (lock.WithOwner:
	// re-entries counted); zero for other grants.
	Holds int
	// Token is the grant's fencing token; zero when the driver cannot tell
	// it cheaply.
	Token uint64
	// Remaining is how long the grant lasts unless it is renewed, by the
	// backend's clock: zero when the backend cannot tell
	// (Unknown.Remaining), NoExpiry for a grant that never expires (a
	// plain lock set without one).
	Remaining time.Duration
	// Since is when the grant was made, or, where the backend records only
	// that (ZooKeeper's node creation), when its request was queued; zero
	// when unknown (Unknown.Since).
	Since time.Time
	// Note is the grant's Lease.Note; empty when it has none or the
	// driver stores no notes (Caps.Notes).
	Note string
}

// NoExpiry is Holder.Remaining for a grant without an expiry.
const NoExpiry time.Duration = -1

// Waiter is one live waiter in a key's queue.
type Waiter struct {
	// Owner is the waiting attempt's owner token (for a Foreign node in
	// a ZooKeeper queue, its name). Named owners never queue (see
	// Lease.Reentry).
	Owner string
	Mode  Mode
	// Limit is a Permit waiter's semaphore size; zero for other modes.
	Limit int
	// Since is when the waiter joined the queue; zero when unknown.
	Since time.Time
}

// Unknown lists what a driver could not tell about a key; the matching
// fields of KeyState are then left zero.
type Unknown struct {
	// Remaining: how long the holders' grants last (memcached's client
	// cannot read an item's expiry; ZooKeeper's grants last as long as
	// their session).
	Remaining bool
	// Tokens: the fencing token of at least one holder (one the backend
	// keeps nowhere apart from its counter, such as a Redis reader's).
	Tokens bool
	// Since: when at least one holder was granted, or one waiter queued.
	Since bool
	// Waiters: whether anyone waits (the backend keeps no queue the
	// driver reads: memcached's waiters poll).
	Waiters bool
}
