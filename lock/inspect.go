package lock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Mode is the kind of a grant: Exclusive (Lock, TryLock), Shared (RLock,
// TryRLock) or Permit (Acquire, TryAcquire). Its String method gives
// "exclusive", "shared" or "permit".
type Mode = driver.Mode

// The modes of a grant.
const (
	Exclusive = driver.Exclusive
	Shared    = driver.Shared
	Permit    = driver.Permit
)

// NoExpiry is Holder.Remaining for a grant that never expires: a plain
// lock that another client set without an expiry.
const NoExpiry = driver.NoExpiry

// KeyState is what Inspect found of a key: who holds it, who waits for it,
// and what the backend could not tell.
type KeyState struct {
	Key string
	// Holders are the key's live grants: one for an exclusive lock (a
	// named owner's with all its holds), one per reader or permit, in
	// grant order where the backend tells it.
	Holders []Holder
	// Waiters are the Lock, RLock and Acquire calls queued by the backend
	// for the key, first in line first; empty on backends that keep no
	// queue (Unknown.Waiters). A call with an explicit retry strategy,
	// and a named owner's, waits by polling on every backend and is not
	// listed. The Redis drivers each list their own queue only: in a
	// fleet that mixes redisnx and rediswatch, each sees its own waiters.
	Waiters []Waiter
	// MoreWaiters: more waiters are queued than the 1000 listed.
	MoreWaiters bool
	// Unknown says what the backend could not tell; the matching fields
	// are then zero.
	Unknown Unknown
}

// Held reports whether anyone holds the key.
func (s *KeyState) Held() bool { return s != nil && len(s.Holders) > 0 }

// Holder is one live grant of a key.
type Holder struct {
	// Owner identifies the grant: for a named owner (WithOwner), its 16
	// hex digits, the same for every hold and every grant of that owner
	// (Owner(id) gives them); otherwise the grant's owner token, 32
	// hex digits, the same as in its Lease's Handle; for a Foreign grant,
	// what the backend holds in its place (a plain Redis lock's value, a
	// ZooKeeper lock node's name).
	Owner string
	// Holds is the number of holds of a named owner's grant (re-entries
	// counted); zero for other grants.
	Holds int
	// Foreign: a grant no dlock driver made (a plain SET NX lock such as
	// redsync's or redislock's, a zk.Lock or Curator lock node), which
	// dlock's grants of the key wait for like any other. Mode is then how
	// the driver reads it: Exclusive, the safe reading of a lock whose
	// recipe is unknown.
	Foreign bool
	Mode    Mode
	// Limit is a permit's semaphore size; zero for other modes.
	Limit int
	// Token is the grant's fencing token, or zero where the backend cannot
	// tell it cheaply (Unknown.Tokens).
	Token uint64
	// Remaining is how long the grant lasts unless it is renewed, by the
	// backend's clock: zero where the backend cannot tell
	// (Unknown.Remaining), NoExpiry for a grant without an expiry.
	Remaining time.Duration
	// Since is when the grant was made (on ZooKeeper, when its request
	// was made: a holder that waited was granted later); zero where the
	// backend cannot tell (Unknown.Since).
	Since time.Time
	// Note is what the grant was made with by WithNote (an Election's
	// announcement); empty when none, or when the backend stores no notes
	// (Supports(Notes)).
	Note string
}

// Waiter is one queued waiter of a key.
type Waiter struct {
	// Owner is the waiting call's owner token, which its Lease will have
	// once granted (another client's lock node's name, on ZooKeeper).
	Owner string
	Mode  Mode
	// Limit is a permit waiter's semaphore size; zero for other modes.
	Limit int
	// Since is when it joined the queue; zero where the backend cannot
	// tell (Unknown.Since).
	Since time.Time
}

// Unknown says what a backend could not tell about a key.
type Unknown struct {
	// Remaining: how long grants last. memcached's client cannot read an
	// item's expiry; a ZooKeeper grant lasts as long as its session.
	Remaining bool
	// Tokens: the fencing token of at least one holder. Redis keeps no
	// token for a reader or a permit; memcached none for a grant of an
	// anonymous owner (its counter is drawn after the grant).
	Tokens bool
	// Since: when at least one holder was granted or waiter queued (Redis
	// records neither for a grant, nor rediswatch for its waiters;
	// memcached nothing).
	Since bool
	// Waiters: whether anyone waits. memcached keeps no queue: its
	// waiters poll.
	Waiters bool
}

// Inspect asks the backend who holds key and who waits for it, for
// operators and diagnostics ("who holds this lock?"): the holders with
// their owner, mode, limit, fencing token, remaining time and the time of
// their grant, and the queued waiters, each as far as the backend can
// tell (KeyState.Unknown says what it could not). The driver packages'
// docs say what each backend tells.
//
// Inspect only reads: it changes nothing on the backend (no grant, queue
// entry, counter or expiry is made, moved or cleaned up) and holds
// nothing. Its answer describes one moment, which may be past by the time
// it returns; it is no substitute for TryLock, which alone says whether
// this caller can have the key. An owner token it shows is what anyone
// with read access to the backend's lock state sees.
//
// The key is checked as for Lock: an invalid key (and a Locker with
// invalid options) gives an error wrapping ErrInvalid, before any I/O. A
// backend whose driver cannot inspect keys refuses with ErrUnsupported
// and the reason. Inspect returns when ctx ends, with an error wrapping
// ctx.Err(); a backend failure is returned wrapped, with the key; a closed
// Locker gives ErrClosed. A key nobody holds or waits for gives an empty
// KeyState and a nil error.
func (lk *Locker) Inspect(ctx context.Context, key string) (*KeyState, error) {
	const op = "inspect"
	switch {
	case lk == nil:
		return nil, newError(op, key, ErrInvalid, errNilLocker)
	case ctx == nil:
		return nil, newError(op, key, ErrInvalid, errNilContext)
	}
	if err := lk.checkCall(op, key, checkKey(key)); err != nil {
		return nil, err
	}
	if err := lk.refuse(op, key, Inspect); err != nil {
		return nil, err
	}
	in := lk.d.(driver.Inspector)
	// The driver checks the key and its own configuration as for a Lock
	// of the key, before any I/O.
	probe := driver.Lease{Key: key, Mode: driver.Exclusive, TTL: lk.opts.TTL}
	if err := lk.d.Validate(&probe); err != nil {
		return nil, driverError(op, key, err, ErrInvalid)
	}
	sc, err := lk.enter(ctx, op, key)
	if err != nil {
		return nil, err
	}
	defer sc.exit()
	ctx = sc.ctx
	var st driver.KeyState
	// Nothing to clean up after an abandoned call: it only reads.
	ok, err := lk.within(ctx, func() error {
		var err error
		st, err = in.Inspect(ctx, key)
		return err
	}, nil)
	switch {
	case !ok:
		return nil, ctxError(op, key, nil, ctx)
	case err == nil:
	case errors.Is(err, driver.ErrInvalid):
		return nil, newError(op, key, ErrInvalid, err)
	case ctx.Err() != nil:
		return nil, ctxError(op, key, nil, ctx)
	default:
		return nil, newError(op, key, nil, err)
	}
	return keyState(key, st), nil
}

// Owner returns what Inspect shows as the Owner of a grant of the owner
// named id (WithOwner(id)): 16 hex digits derived from id.
func Owner(id string) string { return namedOwner(id)[:driver.NamedOwnerLen] }

// NamedOwner is Owner(id).
//
// Deprecated: use Owner.
func NamedOwner(id string) string { return Owner(id) }

// keyState is the driver's st for key in this package's terms.
func keyState(key string, st driver.KeyState) *KeyState {
	s := &KeyState{
		Key:         key,
		MoreWaiters: st.MoreWaiters,
		Unknown:     Unknown(st.Unknown),
	}
	for _, h := range st.Holders {
		owner := h.Owner
		if h.Holds > 0 && !h.Foreign && len(owner) >= driver.NamedOwnerLen {
			owner = owner[:driver.NamedOwnerLen]
		}
		s.Holders = append(s.Holders, Holder{
			Owner: owner, Holds: h.Holds, Foreign: h.Foreign, Mode: h.Mode, Limit: h.Limit,
			Token: h.Token, Remaining: h.Remaining, Since: h.Since, Note: h.Note,
		})
	}
	for _, w := range st.Waiters {
		s.Waiters = append(s.Waiters, Waiter(w))
	}
	return s
}
