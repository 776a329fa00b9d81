// Package memcached is dlock's Memcached driver: a lease is an item made
// with memcached's atomic add and an expiration, released and refreshed
// only through a compare-and-swap that checks the owner.
//
//	mc := memcache.New("10.0.0.1:11211", "10.0.0.2:11211")
//	locker := memcached.New(mc, nil)
//	lease, err := locker.Lock(ctx, "orders/42")
//
// # Algorithm
//
// Each lease has a random owner token (32 hex digits); each user key maps
// to a lock item and a fencing counter (see Keys; docs/wire/memcached.md
// in the repository is the wire format).
//
//   - Grant: add(lock, owner, N seconds), which fails if the item exists,
//     so the grant and its expiry are one atomic step; then incr(counter)
//     for the fencing token. 2 round trips (3 or 4 when the counter is
//     missing). A held key costs 1 round trip (the failed add).
//   - Release: gets(lock), compare the value with the owner, then cas with
//     expiration -1. Memcached stores an item with a negative expiration as
//     already expired, and the cas applies only if the item is unchanged
//     since the gets, so this is an atomic compare-and-delete. 2 round trips.
//   - Refresh: gets, compare, cas with the new expiration: the larger of
//     its TTL and the one recorded in the item's flags (see Resume), which
//     it records, so it never shortens the grant, which another Lease may
//     hold with a longer TTL. 2 round trips.
//   - Resume (lock.Locker.Resume): get(counter) to check the token, then
//     gets, compare, cas. It never shortens the grant, whose first Lease
//     counts on its expiration: memcached's get does not tell an item's
//     expiration, so the grant, refresh and resume of an anonymous grant
//     record the one they set (in seconds) in the item's flags, and a
//     resume sets the larger of that and its own TTL. 3 round trips.
//
// An uncontended Lock and Unlock is 4 round trips. A cas that loses a race
// (the item changed after the gets) is tried again only if a new gets shows
// the item still holds the caller's owner token (another refresh of the
// same lease changed it); an item of another owner, or a missing one, gives
// lock.ErrNotHeld and is left alone. Nothing is ever deleted with a plain
// delete.
//
// # Validity and memcached's clock
//
// Memcached does not read the clock per request. It keeps current_time, a
// count of whole seconds, updated by a timer callback (clock_handler in
// memcached.c) that re-arms itself for one second each time it runs, and
// stores an item of expiration N as expiring when current_time reaches its
// value at the store plus N. Two things make an item live less than N
// seconds after its request:
//
//   - current_time is the whole second read at the last tick, so it lags
//     the true time by up to a second: an item can expire N-1 seconds after
//     its request.
//   - Each tick runs a little late (the timer is re-armed after the
//     callback and libevent's epoll wait rounds up to a millisecond; on
//     memcached 1.6.18 here ticks came every 1.0007 s on average), so the
//     phase of the ticks drifts, and whenever it crosses a whole second
//     current_time skips one: an item stored up to a second before such a
//     tick, or whose lifetime spans one, can expire just over N-2 seconds
//     after its request. With ticks 0.7 ms late (an idle host; later on a
//     busy one), a skip comes every 25 minutes or so; for 30-second leases,
//     about 2% of grants span one.
//
// An item also lives at most about N seconds, so a crashed holder's key is
// free within its TTL. This driver therefore reports as a lease's Validity
// N-2 seconds, which lock counts from the moment the grant or refresh
// request was sent, less its drift margin (driver.DriftMargin, which also
// covers the tick's lateness). Hence the TTL rules:
//
//   - TTLs are whole seconds, rounded up (3.5 s becomes 4 s, valid 2 s).
//   - The least is MinTTL, 3 s: valid for 1 s. A 2 s TTL would leave no
//     validity at all and is refused. (The design asked for 2 s, reasoning
//     from the one-second lag alone; the skipped second makes it 3.)
//   - The most is MaxTTL, 30 days: memcached reads a longer expiration as
//     an absolute Unix time.
//
// Anything else is refused with lock.ErrInvalid before any I/O, with a
// message that says why. Lease.TTL reports the TTL asked for.
//
// The bound assumes memcached's main thread, which runs the clock, is not
// stalled for long: a clock tick delayed by D shortens lifetimes by D too.
//
// # Keys
//
// Memcached keys are at most 250 bytes without spaces or control bytes.
// A user key K becomes PREFIX "l=" K when K has no such bytes and fits, and
// PREFIX "l#" followed by the hex SHA-256 of K otherwise, so every key works
// and two keys never share an item: the "=" and "#" markers keep the two
// forms apart, so a key that looks like a hash cannot meet another key's
// hash. The counter is PREFIX "c" plus the same "=K" or "#hash", ".", and 8
// bytes chosen so that its CRC-32 equals the lock item's: gomemcache's
// ServerList (memcache.New) picks a server by crc32(key) mod n, so the two
// always share a server. PREFIX is Options.Prefix, DefaultPrefix when
// empty; Lockers that must exclude each other need the same one.
//
// # Fencing
//
// Each grant increments the counter. When it is missing (first use,
// eviction, restart, expiry) the grant creates it with add, seeded from the
// wall clock in microseconds, so tokens keep increasing across the loss: a
// counter seeded at time T and incremented n times is at T+n, and a later
// seed exceeds it if the seeding host's clock reads more than T+n
// microseconds. That holds when the clocks of the hosts that lock a key
// agree within the time between a counter's creation and its loss, as NTP
// keeps them, and no clock is stepped back by more. A grant whose add and
// incr took longer than its validity is refreshed by lock before it is used
// (a cas that finds the item only if it never expired, so no other grant
// came between), so tokens follow the order of the grants.
//
// The counter expires 7 days after it was created (memcached's incr does
// not move an expiration), so that keys locked once do not each keep a
// counter until they are evicted; a key in use is seeded again from the
// clock then, a week of microseconds above its last token.
//
// The seed comes from the client's clock, not the server's as for Redis:
// memcached reports its clock only in whole seconds in "stats", which
// gomemcache does not expose, and a memcache.Client given to New does not
// reveal its servers to ask them directly.
//
// # Several servers
//
// Each key lives on one server, chosen by the client; there is no
// replication, and gomemcache's ServerList does not fail over, so keys on
// a server that is down cannot be locked until it is back. Every process
// must use the same server list in the same order: a key that two
// processes map to different servers can be held by both at once. Changing
// the list moves keys, so do it with no lease held (stop the lockers, or
// wait one TTL after stopping them). Tokens of a moved key come from the
// counter on its new server: seeded from the clock if missing, but if that
// server still holds the key's counter from an earlier list (the list was
// changed back) it is behind and tokens go backwards; flush the servers, or
// delete the counters, before reusing an old list. A Locker whose client
// uses another memcache.ServerSelector may find a lock and its counter on
// two servers: the key then needs both up, and a restart of either is
// handled as below.
//
// # Eviction and restarts
//
// Memcached is a cache. Without -M it evicts the least recently used items
// when memory runs out, lock items included, and it keeps nothing across a
// restart (nor across flush_all). A holder learns that its grant is gone at
// its next refresh (with auto-renewal, within a renewal period: lock's
// Renewal), and the lease ends with lock.ErrLost; until then another
// client may be granted the key, so two holders overlap for up to that
// period. Fencing tokens make that overlap
// harmless to a resource that checks them: every grant draws a larger
// token than the grants before it, from the counter or, if the counter was
// lost too, from the clock, so the resource refuses the holder whose token
// it has seen surpassed. To prevent the overlap, give locks their own
// memcached started with -M (refuse stores when memory is full instead of
// evicting) and ample memory (a key's lock item and counter take a few
// hundred bytes).
// Should such a server fill up anyway, adds and cas fail with server errors
// (a cas needs memory too): grants fail, and holders whose refreshes fail
// lose their leases at their deadline while their items stay until they
// expire; no key is ever granted twice.
//
// After a server restart, each connection the client pooled before it
// fails one request (gomemcache then drops it): a Lock or Unlock that meets
// one returns the network error rather than retrying.
//
// # Lost replies
//
// A grant whose reply is lost (a timeout, a broken connection) is removed
// by owner in the background, as on every backend. Memcached has no
// tombstone to leave for it, unlike Redis: an add still on its way that
// reaches the server after that clean-up makes a grant no one holds, which
// keeps the key until its TTL runs out. Exclusion is not at stake, only
// the key's availability for one TTL.
//
// # Waiting
//
// Memcached cannot tell a waiter that a key was released, so a waiting Lock
// polls with add, by default with DefaultRetry: exponential backoff with
// full jitter from 1 ms, capped at 2 ms. A waiter at the cap polls about
// 600 times a second (Go's timers wake on whole milliseconds when the
// process is idle, so waits are 1 or 2 ms plus a little), and gets a
// released key in about 1.3 ms at the median. Many waiters on one key each
// add that load; give them a strategy with a higher cap (Options.Retry or
// lock.WithRetry): the load per waiter is about 2/cap requests a second
// and the median hand-off about cap/3.
//
// # Contexts
//
// gomemcache takes no contexts: each request is bounded by the client's
// Timeout (500 ms by default) instead. So the driver runs each call on a
// lane (lanes.go): a client of its own, made with the client's
// ServerSelector, Timeout and DialContext as they are when the lane is
// made, whose connections the call's context closes when it ends. The
// read or write in flight then fails and the call returns by its context's
// end, on the caller's goroutine; its outcome is unknown, and lock cleans
// it up as a lost reply (a grant is released by owner). The client itself
// carries none of the Locker's requests; at most its MaxIdleConns lanes
// (as it was when New was called) stay idle, each with at most one idle
// connection per server. gomemcache keeps a client's ServerSelector in an
// unexported field, which the driver reads (see selectorOf); should a
// gomemcache version not have it, the Locker has no lanes, and lock runs
// each call on a goroutine of its own instead, returning at the context's
// end while the request goes on.
//
// # Named owners
//
// Holds of a named owner (lock.WithOwner) are kept in the lock item, as
// "H FIRST TOKEN OWNER:SECS ...", updated by cas (see holds.go): a
// re-entry adds its hold and keeps the grant's token, a release removes
// its hold and deletes the item with the last one. The item's expiration
// is set, at every change, to the longest TTL among its holds, counted
// from that change: every hold's deadline counts from its own last grant
// or refresh, which came no later, so no clock but the server's is needed
// (which is what shared leases would lack: see below). A first hold takes
// one round trip more than an anonymous grant (add, incr, then the cas
// that records the hold); until that cas a re-entry finds the key held.
//
// # Inspect
//
// lock.Inspect gets the lock item (one round trip; a get changes nothing,
// not even the expiry) and tells its holder: the owner token, or, for a
// named owner, its holds and the grant's fencing token. It cannot tell
// how long the grant has left (memcached can say, with its meta commands,
// but gomemcache has none), when it was made, an anonymous grant's token
// (the counter is drawn after the add, so its value may still be the
// previous grant's), or who waits: waiters poll, and the server keeps no
// queue. KeyState.Unknown says so.
//
// # Not offered
//
// There is no release notification (driver.Notifier) and no shared lease.
// Readers could share one item updated by cas (a list of reader owners),
// but each share must expire on its own, so that a crashed reader frees its
// share within its TTL while others keep reading: the item would have to
// carry each share's expiry, and memcached gives clients no clock to write
// it in. Written by the readers' own clocks, a client whose clock runs
// ahead would drop a live reader's share and let a writer in beside it; the
// item's own expiration, the one clock the server keeps, is shared by all
// the readers, so one live reader would keep a crashed one's share alive.
// Either breaks a guarantee, so the driver refuses shared leases
// (lock.ErrUnsupported, with this reason, from RLock, TryRLock and
// Supports(lock.SharedLeases)).
//
// Semaphore permits are refused for the same reason (lock.ErrUnsupported
// from Acquire, TryAcquire and Supports(lock.Permits)): the
// permits of one item, updated by cas, must each expire on their own, so
// that a crashed holder's permit returns within its TTL while the others
// hold theirs, and nothing but the item's one expiration can say when.
//
// Renewals are not batched (driver.BatchRefresher): gomemcache sends each
// cas as its own round trip, so a batch could only merge the gets; lock
// already runs up to 16 refreshes at once.
//
// # URLs
//
//	memcached://HOST[:PORT][,HOST[:PORT]...][?PARAMS]
//
// lists the servers in order (port 11211 when none is given). Parameters,
// besides those of every scheme (ttl, autorenew; see lock.Open):
//
//	prefix=P     Options.Prefix
//	timeout=D    the client's per-request timeout, e.g. 250ms (gomemcache's
//	             500ms when absent)
//
// and the TLS parameters every driver shares; any of them makes every
// connection TLS (memcached -Z):
//
//	tls_ca=FILE                    PEM CA certificates that verify the servers
//	                               (default: the system's roots)
//	tls_cert=FILE&tls_key=FILE     a PEM client certificate and its key, both or neither
//	tls_server_name=NAME           the name verified (and sent as SNI) for every
//	                               server; default: each server's host in the URL
//	tls_insecure_skip_verify=BOOL  true does not verify the servers: for tests only
//
// User info, a path or any other parameter is an error wrapping
// lock.ErrInvalid, and so is a TLS file that is missing or unreadable, a
// certificate without its key, or a bad boolean, before any connection.
// The Locker owns the client it makes (a memcache.ServerList,
// MaxIdleConns 16) and closes its connections on Close; connections are
// made on first use, TLS ones through gomemcache's DialContext with a
// tls.Dialer, bounded by the client's timeout.
//
// With New, set Options.TLS: New installs the same TLS dial as the
// client's DialContext.
//
// # As
//
// lock.As gives access to the client: a *memcache.Client target is set to
// it.
//
//	var mc *memcache.Client
//	if locker.As(&mc) { ... }
//
// # Errors
//
// Bad TTLs, a bad Prefix, a nil client or Options.TLS with a client that
// has its own DialContext give errors wrapping lock.ErrInvalid. A server
// whose certificate does not verify fails the calls with crypto/tls's
// error inside ("tls: failed to verify certificate: x509: ..."). A held key gives lock.ErrNotAcquired. Server and
// network failures (including "SERVER_ERROR out of memory" under -M) are
// wrapped, with the memcached command that failed, in the lock.Error of the
// call. A release or refresh whose cas kept losing to changes of the
// caller's own item (ten times) fails with such an error too, leaving the
// item as it was.
package memcached
