// Package redisnx is dlock's Redis driver: a lock is a Redis key set with
// SET NX PX to its owner's token, released and refreshed by Lua scripts that
// act only if the key still holds that token. It works with a single server,
// Sentinel (a failover client), Redis Cluster and a Ring, through the
// caller's go-redis client:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	locker := redisnx.New(rdb, nil) // a lock.Locker
//
// or from a URL with lock.Open (see URLs). It needs Redis 5 or later
// (tested with 7.0). Where scripts are refused, use rediswatch. The design,
// and why, is in docs/design.md in the repository; the wire format in
// docs/wire/redis.md.
//
// # Algorithm
//
// The lock on key K is the Redis key "dlock:{K}" (the prefix is
// Options.Prefix), holding the grant's owner token and nothing else. Each
// operation is one script and one round trip: a grant sets the key (SET NX
// PX, whole milliseconds) if it is free and no live waiter is queued, and
// takes a fencing token; a release deletes the key if it holds the owner's
// token, and hands it to the first live waiter queued; a refresh extends
// it (PEXPIRE) on the same condition, never shortening it (only when its
// PTTL is shorter: another Lease of the grant, see lock.Locker.Resume, may
// count on more). Renewals are batched: one script per
// server, Cluster slot or Ring shard, all in one pipeline. A grant whose
// reply is lost is released by owner; a tombstone voids a late copy of it.
//
// A fencing token is the counter "dlock:{K}:fence" plus one, or the
// server's clock in microseconds when that is more, so tokens keep
// increasing when the counter is lost (a restart without persistence, an
// eviction, its 7-day expiry) or set back (a failover to a lagging replica).
//
// A plain SET NX lock on the same key (redsync, redislock) and a rediswatch
// lease exclude this driver's leases and are excluded by them, so they can
// share keys; each driver queues its own waiters.
//
// # Shared (read) leases
//
// The Locker grants shared leases (RLock, TryRLock). While readers hold a key, "dlock:{K}"
// holds "R" (never an owner token), with a PX at least as long as the
// longest reader's, so every exclusive attempt, this driver's, rediswatch's
// or a plain SET NX lock's, finds it held; each reader's share is a member
// of the sorted set "dlock:{K}:r", scored by when it expires on the
// server's clock. A share expires on its own: a crashed reader frees its
// share within its TTL, and the next script that looks drops it. Readers
// queue behind a waiting writer (none overtakes it), and the release that
// frees the key hands it to every reader queued in a row at the head of the
// queue at once, each with its own fencing token from the key's counter.
// The last reader to leave deletes both keys and hands the key on.
//
// # Semaphores
//
// The Locker grants semaphore permits: Acquire(ctx, key, limit) and TryAcquire
// take one of limit permits of a key. While permits are held, "dlock:{K}"
// holds "S" and the limit in decimal ("S4"), with a PX at least as long as
// the longest permit's; each permit is a member of the sorted set
// "dlock:{K}:s", scored by when it expires on the server's clock, and
// takes its own fencing token from the key's counter. Both Redis drivers
// use this layout (internal/redisx names it), so that rediswatch's permits
// of a key count with these. A permit is granted while the key is free, or holds
// fewer than limit live permits, and no waiter is queued before it:
// permit waiters queue with the others, a writer or reader queued behind
// permits waits for all of them to go, and permits that come after it wait
// behind it. A release hands the returned permit at once to the permit
// waiters in a row at the head of the queue, up to the limit; the last
// permit to go deletes both keys and hands the key on. Each permit expires
// on its own: a crashed holder's returns within its TTL, and the lock key's
// PX follows the longest permit left. An attempt whose limit differs from
// the one the key's permits (held, or queued among the first 64 waiters)
// were granted with fails with lock.ErrInvalid, saying both, and changes
// nothing. As for readers, a plain SET NX lock of the key (redsync,
// redislock) keeps permits out, and is refused while any permit is held.
//
// # Waiting
//
// A blocking Lock waits in a FIFO queue kept on the server; lock runs the
// wait and checks at least once a second. A release hands the key to the
// first live waiter in the same script (a releaser that locks again at
// once goes to the end of the queue) and wakes it alone, on its Locker's
// inbox (one pub/sub connection per Locker, or per Ring shard). The
// message only wakes the waiter, and grants nothing: anyone allowed to
// publish on the channels could send it. The waiter then checks on the
// server, in one round trip, that the key is its own, extends it to the
// TTL and takes the token the release recorded; a forged, replayed or
// stale message gets it nothing while another client holds the key.
//
// Most waiters get the grant with no message: the release pushes it to a
// list of the wait's own, P{K}:g:OWNER:NONCE, on which the waiter blocks
// with BLPOP. Over a *redis.Client each step of the wait is one pipeline
// on the caller's goroutine (LLEN, the wait script, BLPOP), so a queued
// grant costs the waiter one round trip; over a Cluster or Ring a
// goroutine per wait blocks on the list. A Locker blocks at most half its
// client's pool size; its other waits are woken on the inbox.
//
//   - TryLock never queues, and is fair to the queue: a free key with live
//     waiters queued goes to the first of them, and TryLock is refused.
//   - A Lock given a retry strategy (lock.Options.Retry, lock.WithRetry)
//     does not queue: it retries by that strategy, woken by releases.
//   - A queue entry not renewed for 3 s is dead and is skipped. A waiter
//     that crashes less than 3 s before its turn is still handed the key,
//     which then stays held until its TTL runs out, as a crashed holder's.
//     A Lock that gives up leaves the queue, passing on a key just handed
//     to it; if the server cannot be reached, its entry dies after 3 s.
//
// # Inspect
//
// lock.Inspect runs inspect.lua, a script that only reads (GET, PTTL,
// TIME, ZRANGE, HGET, HLEN: no new ACL rule), so one round trip gives one
// snapshot: each holder with its owner, mode, limit and time left (the
// lock key's PTTL; a reader's or permit's score less the server's clock);
// an exclusive grant's fencing token (the counter's value, which no other
// grant moves while it holds; a named owner's, from its holds) but no
// reader's or permit's, which Redis keeps nowhere; no grant time. Waiters
// are those of this driver's queue, in order, each with when it joined
// (its score); rediswatch's waiters of the same key queue apart and are
// not listed. A plain SET NX lock on the key shows as a foreign holder
// with its value. Nothing expired is cleaned up on the way.
//
// # Failure modes
//
// A lease is only as safe as the Redis primary that granted it. Another
// client can take a key still held after a failover with asynchronous
// replication (WAIT or min-replicas-to-write narrows the window), a restart
// without persistence (or, with appendfsync everysec, one that lost the last
// second of grants), a server clock stepped forward (keys expire early), or
// an eviction (use noeviction or volatile-* on lock servers). Fencing keeps
// a guarded resource safe then, and when a holder pauses past its lease, if
// the resource refuses tokens below one it has seen; it does not cover a
// server clock set back while the counter was lost.
//
// # URLs
//
//	redisnx://[user:password@][host][:port][/db][?params]          one server
//	redisnx://[user:password@]host:port,host:port,...[?params]     a Redis Cluster
//	redisnx://[user:password@]sentinel:port,...?master_name=NAME   Sentinel failover
//	redisnxs://...                                                 the same over TLS
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
// certificate without its key, before any connection. rediswatch reads URLs
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
// lock.As reaches the go-redis client: a *redis.UniversalClient target is
// set to it, and a **redis.Client, **redis.ClusterClient or **redis.Ring
// target when the client is of that type.
//
// # Errors
//
// Backend failures reach the caller wrapped by lock, naming the key, with
// go-redis's error inside (errors.Is(err, redis.ErrClosed), say). Invalid
// options (a prefix with braces, a nil client) are reported by the first
// call as lock.ErrInvalid. Unlock can report lock.ErrNotHeld for a release
// that happened, when go-redis resent it after a read timeout.
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
// Scripts run with EVALSHA (EVAL when the server lacks them), and the ACL
// checks the commands they call too; waiting uses SUBSCRIBE, UNSUBSCRIBE
// and PING, and LLEN and BLPOP on the wait's grant list (the scripts push
// grants there with RPUSH). All keys and channels start with the prefix.
// The rules
//
//	-@all +@connection +evalsha +eval +get +set +del +exists +pexpire +pttl
//	+incr +time +hget +hset +hdel +hexists +hlen +zadd +zscore +zrange
//	+zrem +zremrangebyscore +zcard +publish +subscribe +unsubscribe
//	+rpush +llen +blpop ~dlock:* &dlock:*
//
// are enough on a standalone server, semaphores and lock.Inspect included
// (TestMinimalPermissions and TestMinimalPermissionsPermits run with
// exactly these); a Cluster client also needs +cluster|slots.
//
// The last three are needed for the pushed grant only. Without them (the
// rules of releases before grant lists) the driver falls back to
// wake-ups: a release whose push is refused wakes the waiter on its inbox
// instead, and a Locker refused LLEN or BLPOP stops using grant lists
// (logged once at Info) and its waits queue without one: one request more
// per hand-over, nothing fails (TestAudit39PreviousACLRules).
//
// # Names
//
// For user key K and prefix P, a lock's Redis names (P{K}, P{K}:fence, the
// queue P{K}:q and P{K}:w, the readers P{K}:r, the holds of a named owner
// P{K}:h, the permits P{K}:s, the grants' notes P{K}:n, tombstones
// P{K}:void:OWNER, the grant lists of waits P{K}:g:OWNER:NONCE, the
// channel P{K}:rel) share K as
// Cluster hash tag; each Locker has an inbox channel,
// P + "inbox:" + 32 hex digits. docs/wire/redis.md gives the full wire
// format.
package redisnx
