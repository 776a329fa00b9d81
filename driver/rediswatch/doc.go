// Package rediswatch is dlock's Redis driver for servers that run no
// scripts: every lock operation is an optimistic transaction (WATCH, MULTI,
// EXEC) of plain commands, never EVAL, EVALSHA or FCALL, so it works as an
// ACL user denied @scripting, and through proxies and managed services that
// refuse scripts but pass transactions. It works with a single server,
// Sentinel, Redis Cluster and a Ring, through the caller's go-redis client:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	locker := rediswatch.New(rdb, nil) // a lock.Locker
//
// or from a URL with lock.Open (see URLs). Use Redis 5 or later (tested with
// 7.0); before 7.0, which added PEXPIRE's GT option, shares and permits are
// renewed by watched transactions, which other grants of the key can abort
// (see Errors). Prefer redisnx where scripts may run: it needs one round trip where
// this driver needs two, and contention never aborts its operations. This
// driver needs a server or proxy that keeps WATCH, MULTI and EXEC on one
// connection. The design, and why, is in docs/design.md in the repository;
// the wire format in docs/wire/redis.md.
//
// # Algorithm
//
// The lock on key K is the Redis key "dlock:{K}" (the prefix is
// Options.Prefix), holding the grant's owner token. Each operation sends
// WATCH with its reads, then a MULTI/EXEC transaction or UNWATCH. A grant
// reads the key, the fencing counter, TIME and the queue's head, then sets
// the key (SET NX PX, whole milliseconds) and moves the counter. A release
// reads the key and, if it holds the owner's token, deletes it, or hands
// it to the first live waiter queued; a refresh extends it (PEXPIRE) on
// the same condition, never shortening it: it reads PTTL with the key and
// leaves one that lasts the TTL already (another Lease of the grant, see
// lock.Locker.Resume, may count on more). Each takes two round trips (on a Ring, three), so an
// uncontended Lock and Unlock take four. Renewals are
// batched: one transaction per 100 keys of a server, or of a Cluster slot
// (not on a Ring), with one PEXPIRE ... GT per lease on Redis 7 (no PTTL
// read); an aborted one is split in halves, not redone lease by lease.
// A set of lock.LockMany or TryLockMany is tried in one transaction that
// watches every member's key, on one server, or on a Cluster when the
// lock keys share a slot (see AcquireSet in set.go).
//
// A fencing token is the server's clock in microseconds, or the counter
// "dlock:{K}:fence" plus one when that is more: tokens keep increasing when
// the counter is lost or set back. redisnx uses the same key, counter and
// rule, so their leases exclude each other (each driver queues its own
// waiters); so does a plain SET NX lock on the key (redsync, redislock),
// which is waited for. A grant whose reply is lost is released by owner; a
// tombstone the grant watches aborts a late copy.
//
// # Waiting
//
// A blocking Lock waits in a FIFO queue kept on the server (a list); lock
// runs the wait and checks at least once a second. A release hands the key
// to the first live waiter in its own transaction, with a fresh fencing
// token, and wakes it on its Locker's inbox (one pub/sub connection per
// Locker, or per Ring shard); a releaser that locks again at once goes to
// the end of the queue. The message grants nothing (anyone allowed to
// publish on the channels could send it): the waiter named reads, in one
// round trip of reads (MULTI/EXEC), the key its own, its PTTL (the
// validity: the release set the waiter's TTL) and the token the release
// recorded; otherwise (a key with less than half the TTL left, a noted
// lease, a wake-up naming no one) its next attempt finds the key its own,
// extends it to the TTL and takes the token, in two round trips. A forged,
// replayed or stale message gets it nothing while another client holds
// the key. A Lock that gives up
// after a join whose reply was lost leaves a tombstone that aborts that
// join if it reaches the server later.
//
//   - TryLock never queues, and is fair to the queue: it is refused a free
//     key while a live waiter is first in line.
//   - A Lock given a retry strategy (lock.Options.Retry, lock.WithRetry)
//     does not queue: it retries by that strategy, woken by releases.
//   - A queue entry not renewed for 3 s is dead. A waiter that crashed
//     first in line keeps the key free until its entry dies, and another
//     waiter's next check takes its place. A Lock that gives up leaves the
//     queue; if the server cannot be reached, its entry dies after 3 s.
//
// # Shared (read) leases
//
// The Locker grants shared leases, with redisnx's layout, so that the two
// drivers' readers share a key: while readers hold it, "dlock:{K}" holds
// "R" (never an owner) with a PX at least as long as the longest share, so
// every exclusive attempt finds it held, and each share is a member of
// "dlock:{K}:r", scored by when it expires on the server's clock. A share
// expires on its own (a crashed reader frees its share within its TTL).
// Readers queue behind a waiting writer; a release names the first waiter
// rather than handing the key to a reader, and each reader's grant wakes
// the waiter behind it, so readers in a row follow one another in. A
// share's release and renewal watch nothing, as a permit's (see
// Semaphores), so readers coming and going do not abort them. Shares are
// renewed one transaction each, not batched.
//
// # Semaphores
//
// The Locker also grants semaphore permits: Acquire(ctx, key, limit) and
// TryAcquire take one of limit permits of a key, in redisnx's layout, so
// that the two drivers' permits of a key count together. While permits are
// held, "dlock:{K}" holds "S" and the limit ("S4"), with a PX at least as
// long as the longest live permit's, so every lock, share and plain SET NX
// lock of the key finds it held (and a plain SET NX lock keeps permits out);
// each permit is a member of "dlock:{K}:s", scored by when it expires on the
// server's clock. A permit expires on its own (a crashed holder's returns
// within its TTL); an expired member holds nothing, and "S<N>" with no live
// member is free for permits. Permits are done as shares are, in the same
// two round trips: a grant watches the lock key and the counter, counts the
// live permits with one ZRANGE (the limit-th latest expiry) and takes a
// fencing token from the key's counter. A refresh or release acts on the
// caller's member alone, in a transaction that watches nothing, so that
// other permits granted and returned meanwhile do not abort it: a refresh
// lengthens its member (ZADD ... XX GT) and the key's PX to at least its
// permit's (PEXPIRE ... GT), never shortening either, a
// release leaves it alone, and the release that leaves no live permit
// deletes the key, in a watched transaction. An attempt whose limit differs
// from the key's live permits' fails with lock.ErrInvalid and changes
// nothing, and so does one that finds room but a live permit waiter of
// another limit first in line (waiters further back are not read). Permit
// waiters queue in the same FIFO queue as the others: a permit never passes
// an earlier live waiter (a lock waiting behind permits is not passed by
// later ones), a returned permit's release names the first waiter, and each
// permit granted from the queue wakes the waiter behind it, so waiters in a
// row come in up to the limit. Permits are renewed one transaction each, not
// batched.
//
// # Inspect
//
// lock.Inspect reads, in two round trips and without a script: a MULTI/EXEC
// of plain reads (the lock key and its PTTL, TIME, the readers' and
// permits' sets, the holds, the counter, the queue), one snapshot of the
// grants in the layout redisnx shares, then the queued waiters' entries
// (MGET). Each holder comes with its owner, mode, limit and time left;
// an exclusive grant with its fencing token (the counter's value; a named
// owner's, from its holds), a reader or permit without one; none with a
// grant time. Waiters are those of this driver's queue, in order, without
// the time they joined (the list records none); redisnx's waiters of the
// same key queue apart and are not listed. Nothing is written, and no rule
// beyond those below is needed.
//
// # Notes
//
// A grant's note (lock.WithNote: an election's announcement) lives in
// P{K}:n, a hash of owner -> note shared with redisnx, so each driver's
// Inspect shows the other's. The transaction that grants writes it (a
// re-entry keeps the first hold's); a waiter writes its note as it joins
// the queue and at each renewal of its entry, so a release that hands it
// the key grants it with its note. A noted Lease's refreshes lengthen the
// hash, never shortening it (PEXPIRE ... GT on Redis 7; before, its PTTL
// read under WATCH), a resumed Lease keeps its grant's note alive, and a
// release or Leave deletes the field (a Leave that was handed the key: in
// the release that passes it on, never before). Inspect reads the holders' fields
// (HGET, a round trip more when the hash exists). Leases without a note
// send no command on the hash; noted ones are refreshed one at a time,
// not in a batch.
//
// # Failure modes
//
// A restart without persistence, a failover to a replica that lacked the
// grant, or an eviction of the lock key (use noeviction) loses grants:
// another client can take the key before the holder's next renewal finds
// out. A server clock stepped forward expires keys early. Fencing keeps a
// guarded resource that checks tokens safe then, and when a holder pauses
// past its lease. While a Cluster slot migrates, multi-key transactions
// fail (ASK, TRYAGAIN). Before Redis 6.0.9, EXEC is not aborted when a
// watched key expires; the driver checks DEL's and PEXPIRE's replies.
//
// # URLs
//
//	rediswatch://[user:password@][host][:port][/db][?params]          one server
//	rediswatch://[user:password@]host:port,host:port,...[?params]     a Redis Cluster
//	rediswatch://[user:password@]sentinel:port,...?master_name=NAME   Sentinel failover
//	rediswatchs://...                                                 the same over TLS
//
// The host defaults to localhost, the port to 6379; with master_name the
// hosts are Sentinels. On a Sentinel URL the user info authenticates to the
// Sentinels and go-redis's username= and password= to the primary (and its
// replicas); without either, the primary takes the user info's too. One
// server's or a Cluster's credentials are the user info's only: username=
// or password= there is an error. No error quotes a password (it shows
// as xxxxx). Parameters, besides ttl and autorenew (lock.Open):
//
//	prefix=STRING   key prefix (default "dlock:"), without '{' or '}'
//	tls=BOOL        TLS, as the TLS scheme (default false)
//	cluster=BOOL    a Cluster client even for one seed address
//
// and the TLS parameters every driver shares; any of them turns TLS on,
// with the plain scheme too (tls=false beside them is an error):
//
//	tls_ca=FILE                    PEM CA certificates that verify the servers
//	                               (default: the system's roots)
//	tls_cert=FILE&tls_key=FILE     a PEM client certificate and its key, both or neither
//	tls_server_name=NAME           the name verified (and sent as SNI) for every
//	                               server; default: the URL's host for one server,
//	                               each node's own for a Cluster or Sentinels
//	tls_insecure_skip_verify=BOOL  true does not verify the servers: for tests only
//	                               (go-redis's skip_verify is the same; give one)
//
// go-redis's parameters pass through (dial_timeout, read_timeout,
// pool_size, client_name and the rest its URL parsers document); any other
// is an error, and so is a TLS file that is missing or unreadable, or a
// certificate without its key, before any connection. redisnx reads URLs
// alike. The client made has ContextTimeoutEnabled set; the Locker owns
// it, and Close closes it. With New, TLS is your client's: set
// redis.Options.TLSConfig (or the Cluster's, Sentinel's or Ring's) when
// you make it.
//
// # Connections
//
// Over a *redis.Client of one server (TCP, TLS, unix socket), the
// Locker runs each call on a lane: a client of its own with
// one connection, made from your client's options, which the call's context closes when it ends, so that
// a cancelled call returns at once (go-redis alone stops a command only at
// its deadline). At most the client's PoolSize lanes are open per Locker;
// the Locker's Close closes them, and closing your client does not. Hooks
// added to your client (tracing, metrics) do not see the lanes' commands.
// A Sentinel client (redis.NewFailoverClient), a *redis.ClusterClient, a
// Ring or another UniversalClient gets no lanes: its calls are handed to
// a worker goroutine, which the caller can abandon. (A lane's connection
// would stay on a demoted primary after a failover, which go-redis's own
// pool leaves at once.)
//
// # As
//
// lock.As reaches the go-redis client, as redisnx's does (a
// *redis.UniversalClient target, or a **redis.Client, **redis.ClusterClient
// or **redis.Ring target when the client is of that type), and the driver's
// counters: a *Stats target is set to a snapshot.
//
// # Errors
//
// Backend failures reach the caller wrapped by lock, naming the key, with
// go-redis's error inside; invalid options (a prefix with braces, a nil
// client) are reported by the first call as lock.ErrInvalid. A transaction
// aborted by a change to a watched key is, for a grant, a failed attempt
// (another client was first); a release or refresh is retried at once, up
// to MaxAttempts times, and then fails with an error wrapping ErrConflict
// (a backend failure, not lock.ErrNotHeld). Stats counts every abort.
//
// # Logs
//
// go-redis logs through one logger per process (redis.SetLogger), to
// stderr by default. The lines of a client this package built from a URL
// (lock.Open) go to the Locker's Options.Logger at Warn, as "dlock: redis
// client" with the go-redis line, or nowhere without a Logger; those of a
// client you pass to New, and of your other clients, are printed as
// go-redis prints them, or go to the logger you set. To do that, importing
// this package installs a logger with redis.SetLogger at init (go-redis
// has no per-client one, and reads its logger without synchronisation); a
// redis.SetLogger of yours made later replaces it and then receives every
// line, dlock's clients' included. A line go-redis logs outside any call
// of a client (a connection that failed to close; a Sentinel's own dial)
// cannot be told apart and is printed.
//
// # Permissions
//
// All keys and channels start with the prefix. The ACL rules
//
//	-@all +@connection +@transaction +get +mget +set +pttl +time +lrange
//	+del +pexpire +exists +lindex +lrem +rpush +hget +hset +hdel +hexists
//	+hlen +zadd +zscore +zrange +zrem +zremrangebyscore +publish +subscribe
//	+unsubscribe ~dlock:* &dlock:*
//
// are enough on a standalone server, permits and lock.Inspect included;
// a Cluster client also needs +cluster|slots (TestMinimalPermissions runs
// with exactly these, and TestMinimalPermissionsPermits reads them from
// here).
//
// # Names
//
// For user key K and prefix P, a lock's Redis names (P{K}, P{K}:fence, the
// queue P{K}:wq, entries P{K}:we:OWNER, grant records P{K}:wg:OWNER,
// tombstones P{K}:void:OWNER, the readers P{K}:r, holds P{K}:h, permits
// P{K}:s and the grants' notes P{K}:n, the channel P{K}:rel) share K as Cluster hash tag; each Locker
// has an inbox channel, P + "inbox:" + 32 hex. docs/wire/redis.md has the
// wire format.
package rediswatch
