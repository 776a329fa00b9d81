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
// (tested with 7.0).
//
// # Algorithm
//
// The lock on key K is the Redis key "dlock:{K}" (the prefix is
// Options.Prefix). Its value is the owner token of the grant alone, 32 hex
// digits, and nothing else: a plain SET NX lock on the same Redis key (the
// seeds' scripts, redsync, redislock) excludes a dlock lease and is excluded
// by it, so the two can share keys during a migration.
//
//   - Grant (acquire.lua, one round trip): if the key is free and no live
//     waiter is queued (see Waiting), SET key token PX ttl, INCR the fencing
//     counter "dlock:{K}:fence" and return it as the lease's token, or the
//     server's TIME in microseconds when that is more (the counter is then
//     set to it): a counter that is missing (never used, lost with the
//     server's data, evicted) or set back (a failover to a lagging replica)
//     does not make tokens repeat. Setting it to the clock gives the
//     counter an expiry of 7 days, so that keys locked once (per-entity
//     locks) do not leave a counter each forever; a grant after that
//     starts again from the clock. A refused grant returns the holder's
//     PTTL.
//   - Release (release.lua, one round trip): if GET key equals the token,
//     DEL it, then hand the key to the first live waiter queued, or, when
//     none is, PUBLISH "" on the channel "dlock:{K}:rel".
//   - Refresh (refresh.lua, one round trip): if GET key equals the token,
//     PEXPIRE it. Lock's renewal scheduler refreshes many leases at once
//     through RefreshBatch: one script per group of keys (all keys on a
//     single server, one hash slot on a Cluster, one shard of a Ring), at
//     most 100 keys each, all in one pipeline, which go-redis sends to every
//     server at once in one round trip each.
//
// Scripts are sent with EVALSHA, and once more with EVAL when the server
// does not know them (NOSCRIPT, after a restart or SCRIPT FLUSH).
//
// The braces make K the hash tag: the lock key, its counter, its queue and
// its tombstones (below) are in one Cluster slot, as a script needs. A key that
// starts with '}' would give an empty tag, which Redis ignores; such a key is
// stored with the byte 0xff before it (never part of a valid UTF-8 key, so
// no collision). Every key lock accepts works, binary bytes included.
//
// TTLs are applied in whole milliseconds (PX); a lease's validity is the
// TTL so truncated, counted by lock from the moment the request was sent,
// before the server applied it.
//
// # Waiting
//
// A blocking Lock waits in a queue kept on the server, and the release
// hands the key to the first waiter in the same script: waiters are
// granted in arrival order, and a releaser that locks again at once joins
// the end of the queue instead of taking the key back ahead of those who
// waited (as plain SET NX locks let it, starving them). The queue is the
// sorted set "dlock:{K}:q" (owners by arrival, on the server's clock) and
// the hash "dlock:{K}:w" (each waiter's entry: when it dies, its TTL, and
// its Locker's inbox channel; then "g" and its token once granted); both expire 6 s after the last waiter
// touched them.
//
//   - A Lock that finds the key held subscribes to the release channel (see
//     below) and runs wait.lua, which queues it, or grants it the key when
//     the key is free and it is the first live waiter. When the Locker is
//     already subscribed to the key's channel (a busy key), wait.lua is
//     the first attempt: one round trip either way while the key is free.
//   - The release that hands it the key publishes "OWNER TOKEN" on the
//     inbox of the waiter's Locker, a channel "dlock:inbox:ID" each Locker
//     subscribes to (one per Ring shard) while it has waiters, named in the
//     waiter's queue entry. Only that Locker hears it (no herd, not even of
//     connections) and wakes that waiter alone, which runs wait.lua at once:
//     the message is not taken as a grant (anyone allowed to PUBLISH could
//     forge it), wait.lua checks on the server that the key is the
//     waiter's and extends it to the TTL, so the grant's validity counts
//     from that request, whenever the release ran. A hand-off costs that
//     one round trip after the message.
//   - Each waiter runs wait.lua again every second (a heartbeat), and when
//     the holder's PTTL runs out (expiry publishes nothing): that renews its
//     entry, and finds a hand-over whose message was lost, a release that
//     published nothing (a foreign SET NX lock deleted by its owner), or an
//     expired holder (the first live waiter is then granted the key).
//   - An entry not renewed for 3 s is dead (its process crashed or is cut
//     off from the server, or paused for 2 s) and is skipped by the
//     hand-over; a waiter that finds its entry gone joins again at the end.
//     A waiter that crashes less than 3 s before its turn is still handed
//     the key, which then stays held until its TTL runs out, as the key of
//     a crashed holder does.
//   - A Lock that gives up (context ended, Close, a failure) runs leave.lua:
//     it removes its entry, and passes the key on if it was handed to it
//     meanwhile. Nothing is left behind; a leave that cannot reach the
//     server leaves an entry that dies after 3 s.
//   - TryLock never queues, and is fair to the queue: a free key with live
//     waiters queued goes to the first of them, and TryLock is refused.
//   - A Lock with a retry strategy given explicitly (lock.Options.Retry,
//     lock.WithRetry) does not queue: it retries single attempts by that
//     strategy, woken by the release messages, as TryLock makes them.
//
// This departs from the design's "waiters subscribe and fall back to the
// holder's PTTL", which let the releaser re-grab the key: with 32
// contenders on one key, waiters then waited a p99 of about 100 ms, and
// the key changed hands at a fifth of the rate peers reach by letting the
// releaser win. Grant and release remain one round trip each, and a SET NX
// lock of a peer library on the same key still excludes dlock's and is
// excluded by it (its releases publish nothing; the heartbeat finds them).
//
// All waiters of a Locker share one pub/sub connection (one per shard for
// a Ring): a channel is subscribed while some waiter waits on its key and
// for 2 s after, so a busy key is not subscribed anew for every waiter.
// A waiter queues once the server confirmed the subscriptions to the key's
// channel and to the inbox (or after 250 ms without), so it cannot miss the
// message that hands it the key. A
// connection silent for 5 s is pinged; if it fails, or the ping gets no
// answer within 5 s more, it is replaced, and every waiter is woken once
// when its subscription is back, since it may have missed a message
// meanwhile. A Ring's hub follows its shard client; a shard removed from
// the Ring keeps its (failing) hub until Close. The Locker also implements
// driver.Notifier over the same hub, for waiters that do not queue.
//
// On a Cluster, releases use classic PUBLISH, which the Cluster forwards to
// every node, so one connection to any node hears all of them; the price is
// a message on the cluster bus per release and node.
//
// # Lost replies
//
// A grant whose reply is lost (a timeout, a broken connection, go-redis
// resending the request after a read timeout) may have been applied. lock
// then calls Release with the attempt's owner token, which deletes the key
// if the grant was applied and leaves a tombstone "dlock:{K}:void:TOKEN",
// living as long as the lease's TTL, that makes every copy of the grant
// request still on its way refuse itself, whatever order the server runs
// them in. A grant request that reaches the server twice is granted to its
// owner both times (with a new token), not refused as held. A clean-up that
// cannot reach the server (lock gives it Options.ReleaseTimeout) leaves the
// key to its TTL.
//
// go-redis does not interrupt a command in flight when its context is
// cancelled, only when its deadline passes and the client's
// ContextTimeoutEnabled is set; otherwise it waits for ReadTimeout. A Lock
// that waits for a held key returns at once when its context ends; one whose
// request is in flight against a stalled server returns at its deadline
// with a client opened from a URL (Open sets ContextTimeoutEnabled), and
// after ReadTimeout with a client of yours that does not set it.
//
// # Failure modes
//
// A lease is only as safe as the Redis primary that granted it:
//
//   - Failover with asynchronous replication: a grant acknowledged by the
//     old primary may not have reached the replica promoted in its place, so
//     another client can be granted the same key while the first still
//     holds it. The counter on the new primary may lag too; tokens still
//     increase, because a grant takes the server's clock in microseconds
//     when it is ahead of the counter. WAIT, or min-replicas-to-write,
//     narrows the window of a double grant without closing it.
//   - Restart without persistence: every lock and counter is lost. Locks
//     held are gone (another client can take the key at once); tokens stay
//     increasing, because a token is never below the server's clock in
//     microseconds, which has moved on since the last grant. With appendfsync everysec, up to a second of
//     grants can be lost likewise.
//   - Clock jumps on the server: a key's expiry is an absolute time on the
//     server's wall clock, so a clock stepped forward expires keys early,
//     before the holders' local deadlines (lock cannot see that), and one
//     stepped back keeps them longer. A counter lost while the clock is
//     behind may start again below tokens already issued.
//   - Eviction: under maxmemory with an allkeys policy, a lock key or a
//     counter can be evicted; use noeviction or volatile-* for lock servers.
//
// Fencing is what keeps a guarded resource safe in these cases and when a
// holder pauses past its lease: a resource that refuses writes whose token is
// below one it has seen turns a second holder into a refused write. It
// covers restarts, evictions and failovers that lost counter updates
// (tokens follow the server's clock), not a server clock that went back.
//
// # URLs
//
//	redisnx://[user:password@][host][:port][/db][?params]            one server
//	redisnx://[user:password@]host:port,host:port,...[?params]       a Redis Cluster
//	redisnx://[user:password@]sentinel:port,...?master_name=NAME     Sentinel failover
//	redisnxs://...                                                   the same over TLS
//
// redisnx and rediswatch read their URLs alike (one parser,
// internal/redisx), so the same URL makes the same client for
// both, through go-redis's own URL parsers (redis.ParseURL,
// ParseClusterURL, ParseFailoverURL). The host defaults to localhost, the
// port to 6379 (Go's URL parser wants a port on the last of several hosts);
// go-redis's addr=host:port adds hosts too. With master_name the hosts are
// Sentinels, and the user info authenticates to them and to the primary.
// Parameters, besides those of every scheme (ttl, autorenew; see lock.Open):
//
//	prefix=STRING   key prefix (default "dlock:"), without '{' or '}'
//	tls=BOOL        TLS with the system's roots, as the TLS scheme (default false)
//	cluster=BOOL    a Cluster client even for one seed address
//
// and go-redis's: dial_timeout, read_timeout, write_timeout, pool_size,
// pool_timeout, min_idle_conns, max_idle_conns, max_retries, protocol,
// client_name, skip_verify, master_name, read_only, route_by_latency and
// the rest its parsers document. An unknown or repeated parameter is an
// error listing the known ones. The client has ContextTimeoutEnabled set,
// so a call's deadline bounds a request in flight. The Locker owns the
// client it makes: Close closes it. For what a URL cannot say (client
// certificates, a custom CA), make the client yourself and use New.
//
// # As
//
// lock.As reaches the go-redis client: a *redis.UniversalClient target is
// set to it, and a **redis.Client, **redis.ClusterClient or **redis.Ring
// target when the client is of that type.
//
//	var rdb redis.UniversalClient
//	if lock.As(locker, &rdb) { ... }
//
// # Errors
//
// Backend failures reach the caller wrapped by lock, naming the key, with
// go-redis's error inside (errors.Is(err, redis.ErrClosed), for instance).
// Invalid options (a prefix with braces, a nil client) are reported by the
// Locker's first call as lock.ErrInvalid. Unlock can report lock.ErrNotHeld
// for a release that did happen when go-redis resent it after a read
// timeout: the second run finds the key gone.
//
// # Permissions
//
// The commands sent are EVALSHA (EVAL when the server does not have the
// script yet), SUBSCRIBE, UNSUBSCRIBE and PING, plus go-redis's connection
// set-up; the scripts call GET, SET, DEL, EXISTS, PEXPIRE, PTTL, INCR,
// TIME, HGET, HSET, HDEL, ZADD, ZSCORE, ZRANGE, ZREM and PUBLISH, which the
// ACL checks too. All keys and channels start with the prefix. The rules
//
//	-@all +@connection +evalsha +eval +get +set +del +exists +pexpire +pttl
//	+incr +time +hget +hset +hdel +zadd +zscore +zrange +zrem +publish
//	+subscribe +unsubscribe ~dlock:* &dlock:*
//
// are enough on a standalone server (TestMinimalPermissions runs with
// exactly these); a Cluster client also needs +cluster|slots.
//
// # Names
//
// For user key K and prefix P, all Redis names are P{K}... (see above);
// lock keys end in '}', counters in ":fence", tombstones in 32 hex digits,
// queues in ":q" and ":w", so no name of one key is a name of another.
// Channels: P{K}:rel per key, P + "inbox:" + 32 hex digits per Locker.
package redisnx
