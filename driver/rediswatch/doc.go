// Package rediswatch is dlock's Redis driver for servers that run no
// scripts: every lock operation is an optimistic transaction (WATCH,
// MULTI, EXEC) of plain commands, and no EVAL, EVALSHA or FCALL is ever
// sent. It works as an ACL user denied @scripting, and through proxies
// and managed services that refuse scripts but pass transactions.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	locker := rediswatch.New(rdb, nil)
//	lease, err := locker.Lock(ctx, "orders/42")
//
// # When to choose it
//
// Prefer redisnx where scripts may run: it grants, releases and refreshes
// in one round trip each, where this driver needs two, and its operations
// are never aborted by contention. Choose rediswatch when scripting is
// denied (an ACL without @scripting, a managed service or proxy that
// refuses EVAL, a policy against server-side code). It needs a server, or
// a proxy, that keeps WATCH, MULTI and EXEC on one connection; proxies
// that multiplex many clients' commands onto shared connections do not.
//
// # Names on the server
//
// The two drivers use the same names and exclude each other. For a key K
// and the prefix P (default "dlock:", without braces):
//
//	P{K}               the lock: the holder's owner token, with a PX expiry
//	P{K}:fence         the fencing counter (expires 7 days after the last grant)
//	P{K}:rel           the release channel (pub/sub)
//	P{K}:void:OWNER    a tombstone, after a grant whose reply was lost
//	P{K}:wq            the queue of waiting Lock calls: a list of "OWNER INBOX"
//	P{K}:we:OWNER      a queued waiter's entry, alive while it waits
//	Pinbox:ID          a Locker's inbox channel (pub/sub)
//
// The queue is this driver's own: redisnx queues its waiters in "P{K}:q"
// and "P{K}:w", so each driver is fair among its own waiters, while
// exclusion holds between both. A plain "SET P{K} value NX PX ms" lock (redsync, redislock) on the same
// name excludes this driver's leases too, and is waited for. The braces
// make K the Redis Cluster hash tag, so a lock, its counter and its
// tombstones share a slot. Keys are used as they are, any bytes, without
// collisions; a key that starts with "}" (which would make the hash tag
// empty) is carried as "\xff" followed by the key, as redisnx does.
//
// # Algorithm and round trips
//
// Each operation pins one connection (on a Cluster, to the master of the
// key's slot) and sends WATCH pipelined with its reads, then either a
// MULTI/EXEC transaction or UNWATCH:
//
//	grant    1: WATCH counter tombstone; GET lock; GET counter; TIME; LINDEX queue 0
//	         2: MULTI; SET lock owner NX PX ttl; SET counter clock (or INCR counter); EXEC
//	            (or UNWATCH; PTTL lock when GET found the key held)
//	release  1: WATCH lock; LINDEX queue 0; GET lock
//	         2: MULTI; DEL lock; PUBLISH inbox FIRST (or channel ""); EXEC   (UNWATCH if GET != owner)
//	refresh  1: WATCH lock; GET lock
//	         2: MULTI; PEXPIRE lock ttl; EXEC               (UNWATCH if GET != owner)
//	batch    1: WATCH lock1..lockN; MGET lock1..lockN
//	refresh  2: MULTI; PEXPIRE for each lease still held; EXEC
//
// So grant, release and refresh take two round trips each, and an
// uncontended Lock plus Unlock four: the least a read-check-write
// transaction can take without scripts, since what it writes depends on
// what it read. (go-redis's Watch helper would send WATCH as a round trip
// of its own; the driver pipelines it with the reads instead.)
// Auto-renewal refreshes all of a Locker's due leases in two round trips on
// a standalone server; on a Cluster a transaction cannot span slots, so a
// batch is one transaction per slot, eight at a time. A Lock on a held key
// takes the attempt's two round trips, the second of which joins the
// queue; when the key's channel is not subscribed yet, it then subscribes
// (one round trip on the Locker's pub/sub connection) and tries once more
// (two), since a release may have come before the subscription. A hand-off
// is the release's two round trips, one message, and the waiter's grant
// (two). A waiter's heartbeat costs one round trip a second. After a Cluster
// slot moved, the first operation on it costs one more try and round trip;
// clients other than *redis.Client and *redis.ClusterClient (a Ring, say)
// pay one more round trip per operation, for go-redis's own WATCH that
// picks the shard.
//
// The fencing token is the server's clock in microseconds (TIME), or the
// counter plus one when that is more: the grant sets the counter to the
// clock when it is behind, and increments it otherwise. Tokens therefore
// keep increasing when the counter is lost (a restart without persistence,
// an eviction) or set back (a failover to a replica that lagged), as long
// as the server's clock moved forward. This is redisnx's rule too, so
// mixed fleets share the counter. WATCH on the counter keeps that
// read-then-write safe and aborts the grant when another grant, which
// moves the counter, came first.
//
// The grant watches the counter but not the lock key: SET NX makes the
// grant itself conditional on the server, and the counter's write in the
// same transaction keeps token order equal to grant order. Watching the lock
// key would abort grants attempted just as the holder's grant expires,
// because Redis (since 6.0.9) counts a watched key's expiry as a change,
// and that is exactly when waiters retry: at the holder's PTTL. When SET
// NX finds the key taken inside the transaction (by a plain SET NX lock;
// a grant of this driver or redisnx would have moved the counter), the
// counter still moves on, which fencing allows.
//
// # Aborted transactions
//
// EXEC is aborted when a watched key changed after WATCH: for a grant,
// another client was granted the key first; for a release or refresh, the
// lease's own concurrent Refresh touched the key, the grant expired, or
// someone overwrote it. An aborted grant is a failed attempt, reported to
// lock as a held key without a retry hint, so TryLock fails with
// lock.ErrNotAcquired and Lock retries after a notification or its
// backoff. An aborted release or refresh is retried at once, since only
// the holder writes a held key: at most MaxAttempts transactions per call,
// and then the call fails with an error wrapping ErrConflict (a backend
// failure to lock, not lock.ErrNotHeld). Nothing spins. Stats counts every
// abort.
//
// # Waiting
//
// A blocking Lock waits in the key's queue, and is granted the key in
// arrival order: a releaser cannot take the key back ahead of those who
// waited, and a release wakes one waiter, not all of them. This departs
// from the first design (docs/design.md, "Departures"), which had waiters
// woken by every release:
// they then raced with WATCH transactions that mostly aborted, and a hot
// key served 540 grants/s with a p99 wait of half a second. The queue
// needs no script, and no transaction watches it, so joining, renewing
// and leaving it never abort a grant or a release:
//
//   - Lock first makes an ordinary attempt. When the key is held, or free
//     with a live waiter first in line, it joins the queue in the round
//     trip that ends the attempt (UNWATCH; PTTL; MULTI; LREM, SET entry PX
//     3s, RPUSH, PEXPIRE; EXEC), and waits.
//   - A release names the first waiter, on its Locker's inbox channel; its
//     Locker wakes that waiter alone, which makes an ordinary attempt
//     (two round trips) whose transaction also takes it out of the queue
//     and, watching the lock key, cannot take it out without the grant.
//     When no one is queued, the release publishes "" on the key's
//     channel, which wakes every waiter (redisnx releases do the same).
//   - An attempt by anyone else (TryLock, a Lock not yet queued, redisnx's
//     or a plain SET NX lock's owner aside) on a free key with a live
//     waiter first in line is refused; one with a dead waiter first takes
//     the key and removes that waiter, watching its entry.
//   - Every second a waiter renews its entry and reads the key's PTTL, in
//     one round trip, and tries again only if the key is free: that finds
//     a release whose message was lost, a release by a client that names
//     no one, and a dead waiter first in line. A waiter whose entry died
//     (it was paused for 3s) joins again at the end. A waiter also tries a
//     millisecond after the holder's PTTL.
//   - A Lock that gives up (ctx ended) takes its element and entry out of
//     the queue, and if it was first, publishes "" so that the next waiter
//     takes a free key at once.
//
// So a waiter that crashes while first in line holds up the queue for at
// most a second (the next heartbeat of another waiter). A Lock with a
// retry strategy given explicitly (Options.Retry, lock.WithRetry) does
// not queue: it retries by that strategy, on every release of the key
// and at the holder's PTTL, and is refused a free key while a live
// waiter is first in line.
//
// A Locker opens one pub/sub connection on the first wait, shares it
// between all its waiters and keeps it until Close. It subscribes its
// inbox on the first queued wait, and each key's channel while someone
// waits for it and five seconds more, so that a key waited for again and
// again is not subscribed anew each time. After the pub/sub connection
// reconnects, every waiter is woken once, since a release may have been
// published while it was down; a connection that stops answering (a
// partition) is found by a PING within ten seconds and replaced.
//
// # Failure modes
//
//   - A lost grant reply (timeout, cancelled context, broken connection):
//     lock releases by owner token. If the transaction was never sent,
//     that costs nothing. If it was, the clean-up sets the attempt's
//     tombstone for the lease's TTL and deletes a grant it finds; the
//     grant watches the tombstone, so an EXEC still on its way is aborted
//     when it arrives. A release whose reply is lost reports the error
//     and ends the lease; lock retries the release in the background until
//     it succeeds or the grant would have expired.
//   - The server: a restart without persistence, a failover to a replica
//     that had not yet received the grant, or eviction of the lock key
//     (any maxmemory-policy but noeviction may evict it) loses grants, and
//     another client can be granted the key before the holder's next
//     renewal finds out. Fencing tokens keep increasing across such losses
//     (see above), so a guarded resource that checks them refuses the
//     stale holder. Use noeviction and persistence where it matters.
//   - Clocks: the TTL runs on the server's clock; the lease's local
//     deadline on the client's monotonic clock, less lock's drift margin.
//   - A Cluster slot being migrated answers ASK or TRYAGAIN for multi-key
//     transactions; the operation fails with that error until the
//     migration ends (lock retries renewals).
//   - Servers before Redis 6.0.9 do not abort EXEC when a watched key
//     expires; the driver checks the replies of DEL and PEXPIRE, so a grant
//     that expired between GET and EXEC is reported gone there too.
//
// # Permissions
//
// The commands sent are WATCH, UNWATCH, MULTI, EXEC, GET, MGET, SET, PTTL,
// TIME, INCR, DEL, PEXPIRE, EXISTS, LINDEX, LREM, RPUSH, PUBLISH,
// SUBSCRIBE, UNSUBSCRIBE and PING, on keys and channels that start with
// the prefix, plus go-redis's connection set-up. The ACL rules
//
//	-@all +@connection +@transaction +get +mget +set +pttl +time +incr
//	+del +pexpire +exists +lindex +lrem +rpush +publish +subscribe
//	+unsubscribe ~dlock:* &dlock:*
//
// are enough on a standalone server; a Cluster client also needs
// +cluster|slots to learn the topology. (The tests run with exactly these.)
// EXISTS, LINDEX, LREM and RPUSH are new with the queue: a user whose
// rules lack them gets NOPERM errors from every grant and release.
//
// # URLs
//
//	rediswatch://[user:password@][host][:port][/db][?params]            one server
//	rediswatch://[user:password@]host:port,host:port,...[?params]       a Redis Cluster
//	rediswatch://[user:password@]sentinel:port,...?master_name=NAME     Sentinel failover
//	rediswatchs://...                                                   the same over TLS
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
// lock.As reaches the client and the driver's counters:
//
//	var rdb redis.UniversalClient      // always
//	var c *redis.Client                // when the client is one
//	var cc *redis.ClusterClient        // when the client is one
//	var s rediswatch.Stats             // a snapshot of the counters
//	lock.As(locker, &rdb)
//
// # Errors
//
// Operations return the errors of lock (see its package doc), whose causes
// are go-redis's errors and, for a Release or Refresh that gave up on a key
// that kept changing, ErrConflict. Invalid input (a TTL below a
// millisecond, a prefix with braces, a nil client, a malformed URL, an
// unknown URL parameter) is refused with lock.ErrInvalid before any I/O.
// TTLs are applied in whole milliseconds, rounded down, and the lease's
// validity says so.
package rediswatch
