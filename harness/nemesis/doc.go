// Package nemesis is a seeded, randomized checker of dlock's lock contract
// under load and faults, run against every driver on real servers (and
// against broken algorithms, which it must catch: chaos's, and a broken
// semaphore of its own).
//
// # Load
//
// Several Lockers in the test process, each on its own connection through
// its own chaos.Proxy, and one in a child process (the test binary started
// again, as chaos's holders are), each used by several goroutines on a few
// hot keys: Lock, TryLock, RLock and TryRLock where the Locker supports
// shared leases, Acquire and TryAcquire of a semaphore's permits where it
// supports permits (found by Locker.Supports, so a driver that gains
// permits is checked with them), lock.Do (whose fn panics one time in
// five; each process's first Do holds its short, unrenewed lease three
// times its TTL, then panics), holds of random length that write to a fenced resource, Refresh
// with longer and shorter TTLs (some with their reply lost on purpose),
// Unlock, sets of 2 or 3 keys in random order (LockMany and
// TryLockMany: multi.go), of hot keys, or of the set keys (set/N, a pool
// of 4 keys the sets take half of the time, and single-key operations
// now and then: a set of hot keys is rarely free in one step), leases
// left to expire, leases and permits detached
// (Lease.Detach: each process's first lease held to its end that writes,
// then one in eight exclusive leases or permits) and resumed from their handle through another Locker of
// the process (Locker.Resume), most soon, some after the grant expired
// (Resume must then refuse), named owners (lock.WithOwner, the worker's
// name) where the driver keeps holds, with re-entries while a hold is
// held, ended before it or after, contexts that time out or are cancelled
// at random moments (some Lock calls wait 6s, long enough to give a late
// grant up and wait again; each process's first granted TryLock has the
// longest timeout, uncancelled), and Lockers closed under load (some while
// partitioned) and replaced, each then asked for a key of its own
// (TryLock of closed/NAME), which it must refuse.
//
// Where the driver resumes leases (Target.Resume), a held lease's grant
// is also worked on through another Locker of the process (resume_ops.go):
// its live handle resumed with a TTL shorter or longer than the lease's,
// renewal on or off, while the first Lease is held on past the second's
// TTL (the second then detached: Resume only ever extends the grant); and
// a Resume of its handle (its lease detached at once, half of the time),
// a Lock and Close racing on a Locker opened for it, Close begun within
// about one Resume's time, after which a failed Resume must have changed
// nothing for the first Lease. The Leases of one grant are one holder for
// the checker, and a resumed one counts as held only while the first
// does.
//
// One step in ten is a leader election's (election_ops.go): a
// Campaign or TryCampaign in the run's election (lock.Election, a key of
// its own), whose term the winner leads as a holder does (writing to the
// fenced resource with the term's token) and then resigns, or, unrenewed,
// dies, leaving the term to expire; and, where the Locker stores notes
// (lock.Notes), an Observe of the election for up to 800 ms (each
// process's first, 800 ms long, made again until it is shown a leader).
//
// Permits are taken on the same hot keys as the locks, so that their
// exclusion of exclusive and shared leases is checked too: each key is a
// semaphore of 2 or 3 permits (permitLimit, a hash of the key), the limit
// every worker of every process asks for, since a call with another limit
// than the key's live permits' is refused.
//
// # Faults
//
// At random moments, overlapping, in phases of a few seconds separated by
// quiet spells: replies lost after the server applied the request (of
// grants, releases, refreshes, or any write), a client partitioned, its
// command connections delayed (delay-commands: replies up to 2.5s late
// on Redis, past the shorter leases' TTLs) and, apart, its pub/sub
// connections (delay-pubsub: the messages that wake or hand a key to its
// waiters held up to 2.5s, then delivered in order), replies of grants or
// of queued waiters' steps held past the grant's validity (grant-held:
// lock refreshes the late grant, finds it gone, and waits again), both to
// one client at once (handover-late: a waiter's hand-over message comes
// after its own step's late reply made it wait again), the server paused
// (SIGSTOP) shorter or longer than the
// leases, killed and restarted with its data or without (Redis with its
// append-only file removed, memcached), the child process frozen (SIGSTOP)
// or killed and replaced, a holder stalled between its check of the lease
// and its write (as a GC pause would), and, for ZooKeeper, partitions past
// the session timeout (session expiry). The memory driver gets churn,
// stalls, and its store's keys or counters forgotten. Every choice and
// timing comes from the seed (NEMESIS_SEED), so a seed replays the same
// schedule as far as timing allows.
//
// On the Redis targets (Target.Notify) an adversary (adversary.go), an
// ACL user with pub/sub rights only on the dlock channels, listens to
// all of them and publishes what it hears again, at random moments:
// duplicated, replayed up to 3s later, reordered, or mutated (tokens and
// run numbers up and down, hand-overs forged for the waiters other
// messages name, owner and inbox). No message may be taken as a grant
// while another holds the key. The summary counts what it heard and sent,
// the new faults by kind, and the operations on live leases' grants.
//
// On the postgres target the waiters' LISTEN connections go through the
// proxies too: delay-pubsub and handover-late hold their notifications,
// and lost-notify loses some whole (the connection stays up; a
// notification only wakes, so the waiter finds its turn at its next
// step). Its adversary (adversary_pg.go) is a role with no right on the
// driver's schema, which anyone may be, since any role may LISTEN and
// NOTIFY: it listens on the driver's channel and sends wake-ups again
// (duplicated, replayed, stale, reordered) and forged ones, for the
// waiters it heard of or lock.Inspect shows (owner tokens are no secret),
// for holders, and for no one; it also tries to call the schema's
// functions, which must be refused. The target declares AllFaults (so
// do the etcd targets): a run of a minute or more must inject every kind
// of fault it may pick, and once its first phase is over the nemesis
// tries the kinds not injected yet before any other, those that take the
// server (one at a time: a pause, a restart, a leader's loss) first, as
// soon as the server is free, even past the bound of faults at once.
//
// The environment targets (targets_env.go, make nemesis only) vary what
// the servers' own faults do not: postgres-isolation changes the
// database's default isolation level (read committed, repeatable read,
// serializable, a third of the run each; the driver's sessions are ended
// at each change so that they start under it), postgres-pgbouncer runs
// through PgBouncer in transaction mode and restarts it, and etcd-member
// freezes, cuts off from the clients or slows one follower of three at a
// time, which is no server fault: liveness is judged across it. Each
// PgBouncer restart and member fault runs with a witness (witness.go).
// The summary's "environment:" lines say which level ran from when,
// when PgBouncer restarted, and which member was faulted, when and how
// long.
//
// # What is checked, as the run goes
//
// Every process observes its leases (on CLOCK_MONOTONIC, which the child
// shares; see Clock) right after Lock returns, before each write, after
// each Refresh and every 5 ms: held means Done open and the moment before
// Deadline. A lease is proven held from its first observation to its last
// one that found it held before its holder called Unlock (Unlock closes
// Done only when the backend answered; the holder no longer acts
// meanwhile). The Recorder then checks:
//
//   - overlap: two leases of a key proven held at one moment, unless both
//     are shared, or both are permits, or both are holds of one named
//     owner's grant (same owner, same token), or both are Leases of one
//     grant (same owner token and token: a lease and one resumed from its
//     live handle), or the backend lost its state between the first's
//     call (its reply may have come late) and the second's grant (counted
//     as excused): so no exclusive or shared lease is held with a permit
//     of its key;
//   - over-limit: more permits of a key proven held at one moment than its
//     semaphore's limit (two Leases of one grant count once; judged at
//     each permit's grant, where the count peaks; permits granted before a state loss that came before it are
//     not counted, and an excess only they make is excused);
//   - token-order: a grant whose fencing token is not above those granted
//     before it that it excludes (for a shared grant: above the exclusive
//     ones and the permits; for a permit: above the exclusive and shared
//     ones; shared leases, and permits, are granted together in any
//     order); a resumed
//     lease is not a grant, and its token must be the detached lease's
//     (resume-mismatch); nor is a re-entry (a named lease with the token
//     of the worker's hold it re-entered);
//   - stale-write: the fenced resource accepting a write of a lease after
//     a write of a lease granted later (a refused one is fencing at work);
//     exclusive leases write, not readers nor the holders of permits,
//     which share the key: the resource keeps the highest token it saw and
//     would refuse all but the latest of them;
//   - done-late: a lease's Done still open DoneSlack past its deadline;
//   - refresh-not-held: Refresh returned nil but the lease is not held;
//   - late-return: a call returning CallSlack past its context's end, or
//     Close past its ReleaseTimeout plus CallSlack;
//   - limit-mismatch, resume-mismatch: a permit whose Lease.Limit is not
//     the limit asked for (resumed: not its origin's);
//   - note-mismatch: where the Locker stores notes (Supports(lock.Notes)),
//     half the grants are asked with a note (lock.WithNote) naming the
//     worker and the attempt, and after some grants (exclusive, shared or
//     permits; not named owners') an Inspect of the key that shows the
//     grant's owner among the holders shows it with another note (none,
//     for a grant asked without one);
//   - closed-open, unlock-open, detach-open, do-open, do-ctx, err-nil: a
//     lease whose Done is open after Close, Unlock, Detach or Do returned, a Do whose fn
//     context outlived its lease, a Done closed with a nil Err;
//   - detach-refused-ended: a Detach refused (ErrInvalid: the driver cannot
//     resume) that ended a live lease; a lease whose deadline had passed
//     by the refusal's return, or that was over before the call, ended by
//     itself;
//   - multi-partial: after a failed or cancelled set attempt, a holder
//     of one of its keys that is there at once and still after Bound and
//     Recovery, and whose owner token is no lease's of the run: a member
//     the attempt kept (judged at the end, once every lease is reported;
//     drivers without Inspect are not read), unless another set attempt
//     on that key, which failed, was under way all that time (a LockMany
//     holds the keys it took while it waits for the next, by owners that
//     no lease of the run has). A set's members are leases
//     like any other for the other checks, overlap included;
//   - do-panic, unexpected-error: a Do that returned when its fn
//     panicked; a call with valid inputs refused with ErrInvalid;
//   - term: a leader's term overlapping the next: a term granted
//     DoneSlack or more before the previous term's leader saw its Done
//     closed or began to resign (excused where that leader's process was
//     frozen or starved, or the backend lost its state between the two
//     grants); a term whose number is not above the previous one's; an
//     Observe shown a lower term than it was shown before, or a leader
//     without its announcement (terms.go);
//   - liveness: while no server fault is under way (nor was for the
//     target's Recovery), a free key not granted within LivenessBound
//     (liveness/probe); once the faults are healed the load goes on until
//     a probe was judged, so that every run judges one. Across a fault
//     that must spare healthy clients (PgBouncer restarted, one etcd
//     member frozen, cut off or slowed: targets_env.go), a witness's
//     waiter, queued before it, failed or not granted once the holder
//     released (liveness/witness), and the witness's holder's lease lost
//     (held-lost; witness.go).
//
// Timing judgements about a child process that was frozen are excused
// (WakeBound). After the run, with the faults healed: every lease ended
// (not-ended), every hot key granted again with its write accepted
// (no-regrant), nothing left on the backend but expiring tombstones and
// fencing counters (residue/end: chaos's residue finders; on the memory
// Store, the hot keys' and every probe key's entries), keys used once
// leaving no more than a constant on the backend (residue/once: once.go),
// and no goroutine leaked (goroutine-leak, the test). violationKinds
// lists every kind, and detectors every detector (a kind that several
// report is KIND/CHECK: kinds.go).
//
// A run also fails (Summary.Unexercised) unless it exercised what its
// target declares: Shared (its Lockers must support shared leases, and
// shared leases granted), Permits (permits supported, and a semaphore full
// at least once), Reentry (a named owner's grant re-entered), and for every
// target fenced writes accepted, a liveness probe judged, two terms
// won in the election, and a set granted in one step (MultiLease.Atomic:
// the summary's set-atomic) where the driver takes sets in one step
// (driver.SetAcquirer, found on the driver at run time, so that a driver
// that gains AcquireSet is held to it at once), else one granted key by
// key (set-by-key); a Locker that
// supports shared leases or permits without its target declaring it fails
// too.
//
// # Running it
//
//	make nemesis                                   # every driver, 60s each, then the controls
//	NEMESIS_DURATION=120s make nemesis
//	NEMESIS_SEED=42 NEMESIS_DRIVERS=redisnx make nemesis   # replay
//	NEMESIS_DRIVERS=ctl-setnx-ex-del make nemesis          # a broken algorithm
//
// go test runs a 10 s pass per driver (TestNemesis) and TestTeeth, which
// must catch broken algorithms: for every detector, a broken variant on
// the memory driver that only it catches (a wrapping Locker,
// a driver over a memory Locker such as ctl-memory-overbook, which grants
// a permit of a full semaphore, or multi-keep-step, whose one-step
// AcquireSet keeps the keys it took when a later one is held, a broken
// view of the leases, or a broken lock.Do), run for a second or two, several at once, each failing the
// test when its detector stays silent, with a line
//
//	teeth: DETECTOR caught by VARIANT
//
// per detector (a detector none of whose variants a -run selected is
// said not shown; one whose variants ran and that reported nothing fails
// the test); and two of chaos's broken algorithms (make nemesis: all of
// them), which must show overlaps. Each run ends with a line
//
//	nemesis: DRIVER seed S: N ops, F faults, V violations
//
// then its counts (grants by kind, and how many permits filled their
// semaphore, so that the count check is seen judging something), and each
// violation is printed as found, with the history of its key
// around it and the command that replays the seed.
package nemesis
