// Package lock is dlock's portable API for distributed locks: one Locker
// type and one Lease type over every backend, each backend a driver
// package (redisnx, rediswatch, memcached, zookeeper, postgres, etcd,
// memory).
//
//	locker := redisnx.New(rdb, nil)             // or lock.Open(ctx, os.Getenv("DLOCK_URL"))
//	lease, err := locker.Lock(ctx, "orders/42") // blocks until held or ctx ends
//	if err != nil { ... }
//	defer lease.Unlock(context.Background())
//	db.WriteIfNewer(lease.Token(), ...)         // fencing token
//	select { case <-lease.Done(): /* lost: stop work */ ... }
//
// Or let Do hold the lock around a function whose context ends if the
// lease is lost:
//
//	err := locker.Do(ctx, "nightly-report", func(ctx context.Context) error { ... })
//
// # What a backend can do
//
// Every *Locker has every method, whatever its backend. A backend that
// cannot serve a call (shared leases on memcached, Resume on ZooKeeper)
// refuses it before any I/O with an error wrapping ErrUnsupported (and
// ErrInvalid) that names the driver and says why. Supports tells the same
// without a call, for a check at start-up:
//
//	if err := locker.Supports(lock.Permits); err != nil {
//		log.Fatal(err) // "... memcached grants no semaphore permits: ..."
//	}
//
// # What a lease guarantees
//
// A lease is a lock with a time limit (its TTL). While it is held, no other
// lease on the key is granted, by any Locker on the same backend. Every
// driver gives the same guarantees, checked by one conformance suite
// (driver/drivertest) against real servers:
//
//   - Release and refresh are owner-checked: Unlock never deletes, and
//     Refresh never extends, a grant that is not the caller's, even after its
//     own grant expired and another client took the key.
//   - Grants carry their expiry atomically; a holder that dies frees the
//     key within its TTL (ZooKeeper: within the session timeout).
//   - Token returns a fencing token that strictly increases per key, even
//     after the backend lost its state.
//   - Done closes, and Err reports ErrLost, no later than the moment another
//     client could be granted the key, as judged by the local clock (see
//     Lease.Deadline).
//   - A waiting Lock returns promptly when its context ends, and leaves no
//     grant or queue entry behind on the backend (see "What a key leaves
//     behind").
//
// No lease-based lock can stop a holder that is paused (by a GC, a VM
// migration, SIGSTOP) for longer than its TTL from acting as if it still
// held the lock when it wakes up: its Done channel is closed by then, but it
// may not look before its next write. That is what fencing tokens are for:
// a resource that refuses writes carrying a token smaller than one it has
// seen cannot be corrupted by such a holder.
//
// # Renewal
//
// By default each lease is renewed automatically a third of the way to its
// local deadline (renewFraction: every TTL/3 where the backend applies the TTL as it is;
// more often where it gives less, such as memcached's whole seconds or a
// ZooKeeper session timeout shorter than the TTL), until it is released;
// turn that off with Options.DisableAutoRenew or WithDisableAutoRenew(true). One
// scheduler goroutine per Locker renews all of its leases, in batches where
// the driver supports it, with a bounded number of refresh calls under
// way. A renewal that fails for a network reason is retried every tenth
// of the validity (retryFraction); if none succeeds before the lease's local deadline, the lease
// is lost, and its grant is left to expire by its TTL (another Lease may
// hold it: see "Handing a lease over"; ZooKeeper's, which would live as
// long as the session, is released). A renewal the backend refuses (the
// grant is gone) loses the lease at once. Refreshes of one lease
// (renewals and Refresh calls) are sent one at a time, and only ever
// extend the grant on the backend, never shorten it.
//
// The local deadline is the moment the last successful grant or refresh
// request was sent, plus the validity the backend applied, minus a drift
// margin (driver.DriftMargin: 1% of the validity plus 2 ms). It is measured on the monotonic
// clock, so wall-clock jumps do not move it. A refresh whose reply is lost
// may have been applied: before it is sent the deadline is moved to no
// later than what it gives, and no later refresh counts on more.
// Lease.Validity reports the validity, Lease.TTL the TTL asked for; they
// differ where the backend gives something else (memcached: N-2 s of a TTL
// of N s; ZooKeeper: what is left of the session timeout, whatever the
// TTL), and Validity is how long a lease lasts without renewal.
//
// # Waiting
//
// Under DefaultRetry (the default), drivers that queue waiters (redisnx,
// rediswatch, zookeeper, postgres, etcd, memory: all but memcached) hand a waiting Lock the key when its turn
// comes, in arrival order, and a releaser cannot take the key back ahead of
// those who waited. Other drivers retry a held key with an exponential
// backoff with full jitter, but sooner when they can: those told of
// releases retry at once on the news; those that know when the holder's
// grant expires retry then. Any other RetryStrategy (Options.Retry,
// OpenWith, WithRetry) is followed with single attempts on every driver,
// queueing ones included, so that NoRetry and LimitRetry bound a Lock
// everywhere; such a call is not queued. Each call gets its own backoff
// state.
//
// Without WithOwner, locks are not reentrant: a second Lock of a key this
// process holds waits like any other, through the same Locker or another.
//
// # Named owners and re-entry
//
// WithOwner(id) names the owner of a Lock or TryLock. While a lease of
// that owner holds the key, another Lock or TryLock with the same id, from
// any goroutine, Locker or process, is granted at once as a re-entry: a
// new Lease (one hold) with the same fencing token, and the backend counts
// the holds. Precisely:
//
//   - Each hold is a Lease of its own, with its own Unlock, Refresh,
//     renewal, Deadline and Done. A re-entry extends the grant to at least
//     its TTL and never shortens it, so the other holds' deadlines stay
//     true; renewing any hold renews the grant.
//   - Unlock of a hold counts down; the key is released (and handed to the
//     next waiter) when the last hold is unlocked. Holds may be unlocked
//     in any order.
//   - The backend knows the owner only by its id: a re-entry from another
//     process with the same id holds the key beside the first, and either
//     may outlive the other. Pick ids that only one logical holder uses.
//   - When the grant is lost (expired, deleted, taken over), every hold
//     is lost with it: each hold's Done closes, at its next renewal or
//     deadline, with ErrLost. The count goes with the grant: the owner's
//     next Lock is a new grant, with a new token and a count of one.
//   - A hold whose process dies keeps counting until the grant expires:
//     once the last live hold is unlocked, the key is free within the
//     longest TTL among the holds.
//   - A hold can be detached and resumed elsewhere like any lease; its
//     handle's mode is "o".
//   - A named Lock waits by its retry strategy, not in the driver's queue:
//     on a busy key, queued anonymous waiters go first.
//
// redisnx, rediswatch, memcached, postgres, etcd and memory keep holds (the
// Redis drivers in one layout, so that holds of one owner through either
// share a grant); ZooKeeper refuses WithOwner with ErrUnsupported, and
// every driver refuses it for RLock, TryRLock and Resume with ErrInvalid.
//
// # Semaphores
//
// Acquire(ctx, key, limit) grants the permits of counting semaphores: it
// blocks until one of limit permits of key is granted, so at most limit
// holders run at once (N workers on a rate-limited API, N concurrent
// deploys, a pool of licences). Supports(Permits) says whether the
// backend grants them, and why not. A permit is a Lease like any other:
//
//   - its fencing token comes from the key's one counter, so it is above
//     the token of every earlier grant of the key, permit or lock;
//   - Done, Err, Deadline, Refresh, Unlock, automatic renewal (batched
//     where the driver batches), Handle (mode "pN") and Resume behave as
//     for locks;
//   - each permit expires on its own: a crashed holder's permit returns
//     within its TTL (ZooKeeper: its session timeout) while the others
//     stay held;
//   - while any permit is held, Lock and RLock of the key wait, and while
//     a lock is held, Acquire waits: a key is a lock or a semaphore at one
//     time, never both.
//
// limit is the size of the semaphore, given with every call because the
// backends store it with the permits: a call whose limit differs from the
// one the key's live permits (or queued permit waiters) were granted with
// fails with ErrInvalid and changes nothing, so two fleets configured with
// different limits find out at once instead of admitting more holders than
// either expects. Once every permit is gone the key takes any limit.
//
// Waiting is first come, first served on drivers that queue (all but
// memcached): a permit is not granted past an earlier
// waiter of any kind, so a waiting Lock of the key is not starved by
// permits that come after it. Permits are not reentrant: WithOwner is
// refused. memcached grants no permits (its package doc says why).
//
// # Handing a lease over
//
// Lease.Handle describes a grant in one printable word, for a file, a
// command line or an environment variable (dlock run gives its command
// DLOCK_LEASE). Locker.Resume takes the grant over through another Locker
// of the same backend, in this process or another: the backend checks that
// the grant still exists with that owner and token, and the new Lease has
// its own deadline, renewal and Done. Lease.Detach ends a Lease without
// releasing its grant, so that Close leaves it for the resumer. Until one
// of them ends it, a resumed grant is held by both Leases, each renewing
// it with its own TTL; renewals only ever extend it, so neither cuts the
// other's short, and a Lease that is lost (its deadline passed) leaves the
// grant to the other. Unlock of either releases it for both: the other
// finds out at its next renewal, and until then its Done is open while
// another client may take the key, so hand a lease over with Detach, not
// Unlock. A handle is a
// capability: whoever has it can extend and release the grant. ZooKeeper's
// driver cannot resume (a grant belongs to its client's session) and
// refuses with ErrUnsupported.
//
// # Who holds a key
//
// Inspect asks the backend who holds a key and who waits for it, without
// changing anything: for operators, dashboards and the dlock inspect
// command.
//
//	st, err := locker.Inspect(ctx, "deploy/api")
//	for _, h := range st.Holders { fmt.Println(h.Mode, h.Owner, h.Token, h.Remaining) }
//
// Each holder has its owner (a lease's owner token, as in its Handle; a
// named owner's 16 hex digits, which Owner(id) gives; a foreign
// lock's value), mode, a permit's limit, and as far as the backend can
// tell its fencing token, time left and grant time; each queued waiter
// its owner, mode and arrival. KeyState.Unknown says what the backend
// could not tell: memory tells everything; Redis no grant time and no
// reader's or permit's token (rediswatch no arrival either); memcached
// only the holder (and a named owner's token: not the time left, and no
// waiter, since they poll); ZooKeeper everything but the time left, as a
// grant lasts as long as its session. Waiters that poll (a Lock with an
// explicit retry strategy, a named owner's) are never listed. The answer
// is a snapshot: by the time it is read the key may have changed hands.
//
// # Closing
//
// Close ends the leases still held through the Locker at once (Done closes),
// releases their grants, stops its goroutines, makes waiting calls return,
// and closes the backend client if the Locker opened it (Open does;
// drivers' New functions take the caller's client and leave it open). It
// takes at most about Options.ReleaseTimeout: a release that fails is
// retried until then, and then left to the grant's TTL. Later calls return
// ErrClosed.
//
// # What a key leaves behind
//
// A key used once (per job, per request) does not grow the backend for
// ever. Once its grants are released, expired (a crashed holder's, by its
// TTL; ZooKeeper's, with the session) or given up, all that is left of it
// expires by itself:
//
//   - Redis (redisnx, rediswatch): the fencing counter, at most 7 days
//     after the last grant that set it from the clock (almost every
//     grant); a tombstone of an attempt given up, after its TTL (at least
//     3 s); a dead waiter's queue entry, after 3 s.
//   - memcached: the counter item, 7 days after it was created.
//   - etcd: the counter key, at most 7 days after the last grant that
//     wrote it.
//   - ZooKeeper: the key node (and the root, when it empties), a
//     container node that the server deletes at its next container check
//     (every 60 s by default: znode.container.checkIntervalMs). There is
//     no counter: the token is the lock node's zxid.
//   - PostgreSQL: see its driver's package doc.
//   - memory: nothing; a grant that expired unreleased is dropped at its
//     expiry (at most a second after the Store's previous sweep).
//
// A key used again after that gets a higher token all the same: a new
// counter starts from the clock in microseconds, above the old one.
//
// # Failures and time limits
//
// Every call returns when its context ends (deadline or cancellation),
// whether or not the backend's client can stop a request in flight
// (go-redis honours only deadlines, gomemcache and go-zookeeper take no
// context): the request then goes on in the background, and what it did is
// dealt with there (a grant made after Lock gave up is released). Clean-up
// that must follow (removing a grant whose reply was lost, a release that
// failed, leaving a queue) goes on in the background too, bounded by the
// grant's expiry, and Close waits for it up to its own bound. A grant that
// reaches a queued waiter after the validity it counts on has passed is
// refreshed before Lock returns it, so a lease is never returned already
// past its deadline.
//
// # Outages
//
// One rule holds on every backend while it cannot be reached (a server
// stopped or restarting, a network cut, no ZooKeeper session), checked by
// the conformance suite's Outage subtests:
//
//   - A waiting call (Lock, RLock, Acquire, Do) waits through the outage
//     until its context ends, and is granted once the backend is back (on
//     ZooKeeper, on a new session if the old one expired). Each attempt
//     that found the backend unreachable is cleaned up in the background,
//     as any attempt whose outcome is unknown, and the next is made under
//     a new owner token, which that clean-up cannot touch, after a wait
//     drawn from [b/2, b), b doubling from 100 ms to 2 s (a RetryStrategy
//     may wait longer, and, other than DefaultRetry, decides when to give
//     up). A call whose context ends first returns an error wrapping
//     ErrNotAcquired and the context's error, and, when its last attempt
//     found the backend unreachable, ErrUnavailable with the backend's
//     error (a queued wait that rides the outage out in its place, as
//     PostgreSQL's, etcd's and ZooKeeper's do for a while, has none).
//   - A Try call (TryLock, TryRLock, TryAcquire) makes its one attempt and
//     fails with ErrNotAcquired and ErrUnavailable, never ErrHeld, wrapping
//     the client's error, within the client's own bound on a request to a
//     dead server (its dial timeout and retries: a second or two) or its
//     context, whichever ends first. A backend that takes the request and
//     does not answer (a paused or hung server) holds a Try call as long
//     as its client waits for an answer: memcached's per-request timeout
//     (500 ms unless the URL's timeout= says otherwise), go-redis's read
//     timeout, etcd's per-request bound; PostgreSQL's and ZooKeeper's
//     clients wait until the call's context ends (a PostgreSQL step may
//     rightly wait for a row another transaction holds, and a ZooKeeper
//     call for its session), so give Try calls a context with a deadline.
//   - Unlock ends the lease at once and returns the backend's error; its
//     release is retried in the background until the backend answers or
//     the grant has expired, so that an outage keeps the key for the
//     outage, not for the rest of the TTL. Refresh returns the backend's
//     error, with no sentinel: whether the grant still holds is unknown.
//     Automatic renewal retries (see Renewal), and the lease is lost
//     (ErrLost) if none succeeds before its local deadline. Inspect and
//     Resume return the backend's error.
//
// A backend that answers with a refusal (a wrong password, a permission
// an ACL denies) is not out: a waiting call fails at once with its error.
// Each driver tells which of its client's errors mean unreachable
// (driver.ErrUnavailable).
//
// # Errors
//
// Errors are *Error values naming the operation and the key, wrapping one
// of the sentinels ErrNotAcquired, ErrNotHeld, ErrLost, ErrClosed,
// ErrInvalid and ErrUnsupported (what the backend cannot do, which also
// matches ErrInvalid), and the cause: the backend's error, or the
// context's. Beside ErrNotAcquired, ErrHeld says the key was held,
// ErrUnavailable that the backend could not be reached. Check them with
// errors.Is:
//
//	lease, err := locker.TryLock(ctx, key)
//	switch {
//	case errors.Is(err, lock.ErrHeld):             // held elsewhere (also ErrNotAcquired)
//	case errors.Is(err, lock.ErrUnavailable):      // the backend is unreachable (see Outages)
//	case errors.Is(err, context.DeadlineExceeded): // waited too long (also ErrNotAcquired)
//	case errors.Is(err, lock.ErrNotAcquired):      // the backend refused or failed
//	case errors.Is(err, lock.ErrUnsupported):      // not on this backend (see Supports)
//	case errors.Is(err, lock.ErrInvalid):          // bad key, TTL or option: a bug to fix
//	}
//
// A TTL of 0 means the default: DefaultTTL in Options.TTL and a URL's
// ttl=, the Locker's default TTL in WithTTL (Lease.Refresh, which takes
// the TTL to apply, refuses it). Invalid input (an empty key, one over
// MaxKeyLen bytes or not UTF-8, a negative TTL or another outside [MinTTL,
// MaxTTL] or outside what the driver can carry, a malformed URL or an
// unknown URL parameter) is refused before any I/O, and so are
// nil and zero values where a value is needed: a nil context, *Locker, fn
// (Do), Option or RetryStrategy (LimitRetry(nil, n) included), a nil or
// zero *Lease (its methods return ErrInvalid; its accessors zero values,
// with Done closed), a nil driver given to New (every call of that Locker
// but Close fails). No function or method of this package panics on them
// but Register, which panics at init as database/sql's does. Unlock
// with a nil context still ends the lease and releases its grant in the
// background, as after a failed release. Every key a
// Locker accepts is used as it is: drivers map keys that their backend
// cannot carry (Memcached's 250 bytes, ZooKeeper's path syntax) without
// truncation or collisions.
//
// Messages are for people, errors.Is and errors.As for programs: a key or
// any other value a message quotes is cut to 128 bytes, followed by its
// length ("kkkk..."... (1048576 bytes)), while Error.Key holds it whole;
// the drivers' sentinels are said in this package's words; and a duration
// the code computed is rounded (free in at most 30s). Open names
// redisnx:// and rediswatch:// for go-redis's redis:// (and their TLS
// schemes for rediss://).
//
// # Metrics and logs
//
// With Options.MeterProvider (OpenTelemetry's metric API; nil means no
// metrics), New makes these instruments, under the instrumentation scope
// "github.com/dlock-go/dlock/lock":
//
//   - dlock.lock.wait.duration (histogram, s): from the start of a Lock,
//     TryLock, RLock, TryRLock, Acquire or TryAcquire call to its grant or
//     failure. dlock.blocking is false for the Try calls; dlock.outcome is
//     granted, not_acquired (the key was held: a Try call, or the retry
//     strategy gave up), canceled (the context ended, by deadline or
//     cancellation, or the Locker was closed) or error (the backend
//     failed, or the call was invalid). Resume is not measured here.
//   - dlock.lock.hold.duration (histogram, s): from the grant (the return
//     of the call, or of Resume) to the lease's end; dlock.end is unlocked
//     (by Unlock, whether or not its release succeeded), lost, closed (by
//     Locker.Close) or detached.
//   - dlock.leases.held (up-down counter, {lease}): leases granted or
//     resumed and not yet ended.
//   - dlock.leases.lost (counter, {lease}), by dlock.cause: expired (the
//     local deadline passed without a successful refresh), not_held (a
//     renewal, Refresh or Unlock found the grant gone), driver (the driver
//     reported the loss, such as a ZooKeeper session's expiry).
//   - dlock.renewals.failed (counter, {renewal}): automatic renewals that
//     failed for another reason than the grant being gone (the backend's
//     or the context's error); each is retried until the deadline.
//   - dlock.renewals.late (counter, {renewal}): automatic renewals not done
//     when their lease had half its validity left (they start with two
//     thirds left): the Locker is falling behind its leases (too many for
//     the backend or the machine, a slow backend, failing renewals), and
//     loses them if it falls behind by the rest.
//   - dlock.releases.failed (counter, {release}): with dlock.background
//     false, Unlocks whose release failed or was cut short by their context
//     (it goes on in the background); true, background releases that gave
//     up (after a failed Unlock, a lost grant reply or a lost ZooKeeper
//     lease, or in Close), which leave the key to its TTL.
//
// Every measurement has dlock.driver (the driver's name: memory, redisnx,
// rediswatch, memcached, zookeeper, postgres, etcd) and dlock.mode (exclusive, shared or
// permit). With Options.MetricKeys it has dlock.key too; that is off by
// default, since keys can be many (a time series each) or sensitive. The
// attributes are otherwise enumerations, whose sets New makes with the
// instruments: recording allocates nothing, and a no-op provider costs
// nothing measurable. This package imports OpenTelemetry's API, never its
// SDK. The runnable example that wires an SDK MeterProvider (with a
// ManualReader) and a Debug Logger, and prints what they recorded, is
// Example_metricsAndLogs in the repository's harness module
// (harness/observe/example_test.go), so that the SDK stays out of this
// module's go.mod.
//
// With Options.Logger, a Locker logs each lease's life, with the
// attributes key, driver, mode and token (and limit, for a permit):
//
//   - at Debug, "dlock: lease granted", "dlock: lease resumed", "dlock:
//     lease released" (by Unlock), "dlock: lease closed" (by Close) and
//     "dlock: lease detached". Nothing is built unless the Logger is
//     enabled for Debug. Renewals are not logged: a record per lease every
//     TTL/3 would drown the rest, and failed ones are logged at Warn.
//   - at Warn, "dlock: lease lost", with cause (as dlock.cause above) and
//     err.
//   - at Warn, at most every 10 s, "dlock: renewals falling behind: leases
//     will be lost if this goes on", with driver, late (renewals counted in
//     dlock.renewals.late since the last such record), held (leases held)
//     and queued (renewals waiting for a worker).
//
// Other Warn records carry key, driver and err: a renewal that failed and
// is retried, a background release that gave up, a queue that could not
// be left, a subscription that failed. A handle (Lease.Handle) is never
// logged: it is a capability.
//
// # URLs
//
// Open makes a Locker from a URL whose scheme names a driver, so that the
// backend is a matter of configuration; see Open and each driver's package
// doc. Import the driver for its side effect:
//
//	import _ "github.com/dlock-go/dlock/driver/redisnx"
//
// # As
//
// As reaches the driver's underlying client, for what this package does not
// offer; each driver lists what it accepts.
//
// # Drivers
//
// Backends implement package driver's interfaces and wrap them with New;
// users never need that package.
package lock
