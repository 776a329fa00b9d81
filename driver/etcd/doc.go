// Package etcd is the dlock driver for etcd (the v3 API, etcd 3.4 and
// later), through go.etcd.io/etcd/client/v3. It is a Go module of its
// own, so that a program that imports only other drivers never
// downloads etcd's client.
//
// A lock key K is a queue of entries under PREFIX "q/" K "/" (K with '%'
// and '/' escaped), one per attempt, each attached to an etcd lease of
// its own, ordered by create revision; K's fencing counter is PREFIX
// "c/" K. The grant rule reads the queue alone: an exclusive entry is
// granted when first, a shared one when only shared entries are ahead, a
// permit when only permits, fewer than its limit, are ahead. A waiter
// watches only the entries whose departure may be its turn, from etcd's
// revision when the watch is made (a watch from an earlier one waits for
// etcd's 100 ms sync loop), and reads each again when that is past the
// read that found it, so no departure is missed and
// a release wakes only the next waiter; the watch event only wakes it:
// the grant is the waiter's own transaction, which writes its token and
// the counter only if its entry is still the one it made, on its lease
// (a lease that expired while the waiter was blocked ends its place:
// etcd-io/etcd#11456), and moves it to a lease sure to last the
// validity from the call (its waiting lease, or one of the grant's TTL;
// a lease not made or renewed by the call, a spare, reports what is left
// of it). Every holder held past 100 ms watches its own
// entry from the revision after its grant: a deletion (expiry, or an
// operator's delete) ends the lease at once, or when the watch is made;
// a watch that finds that revision compacted reads the entry instead.
// A grant's note (lock.WithNote) ends its entry's value, escaped to one
// field (names.go: noteMark). docs/wire/etcd.md describes every key and value.
//
// concurrency.Mutex is not used, nor its Session: dlock needs a lease per
// grant (each with its own TTL; Detach and Resume hand one grant over),
// renewals batched on one keep-alive stream, and a validity counted from
// when the request was sent.
//
// # Round trips
//
// A released grant's lease is kept, with no key on it, for the Locker's
// next grant of the same TTL (a spare, spares.go), whose validity is then
// what is left of it (at least three quarters of the TTL); so an
// uncontended Lock+Unlock is two KV/Txn requests: the grant, written
// with no read before it when the queue is empty and the counter is
// below the clock (fast.go), and the release; a grant released within
// 100 ms has had no watch made for it. A woken exclusive waiter
// is granted in one KV/Txn on a spare the same way, when its entry is
// still its own and none is ahead of it. A Join of a key that one of
// the Locker's waiters found queued within the last second skips the
// fast grant, which would fail and read, and places its entry at once.
// Every other case reads first, as before. A concurrency.Mutex made with MutexPrefix(K)
// and dlock's locks of K exclude each other.
//
// An entry is named by its Locker and a slot, the lowest free one of the
// key, so a Locker's grants of a key reuse a few names: etcd
// keeps a deleted name in its index until a compaction, and the grant's
// compare over the queue, and every read of it, visit them all (30,000
// names since the last compaction cost a grant about 15 ms on a 2-core
// machine, docs/performance.md). A grant is its entry's create revision,
// which every request on it compares; a reused name never stands for an
// earlier grant. Running etcd with auto-compaction
// (--auto-compaction-retention) is still advised: each Locker that used a
// key leaves its names until then.
//
// # TTLs
//
// etcd's leases last whole seconds: a TTL is rounded up, and must be at
// least MinTTL (one second). The server also has a least lease TTL, 1.5 ×
// its election timeout rounded up to a second (2 s with the default
// 1 s), which it applies to shorter leases: a crashed holder's grant then
// lasts that long. The validity reported is the TTL, which the lease is
// sure to last from the request.
//
// # Fencing tokens
//
// Every grant takes max(counter + 1, the client's clock in µs), written
// with the grant in one transaction that compares the counter's revision
// (or, for the fast grant, its value: the counter is written as 20
// digits with leading zeros, so etcd's bytewise compare is numeric):
// the Redis and PostgreSQL drivers' scale, strictly increasing per key
// while the counter lives (etcd keeps it across restarts and leader
// changes), and rising from the clock if it is deleted. The counter is
// attached to a 7-day lease of its Locker's (counter.go): a key used
// once leaves nothing on etcd a week after its last grant.
//
// # URLs
//
//	etcd://[user:password@]host[:port][,host[:port]...][/prefix][?ttl=30s&autorenew=true&tls_ca=...]
//
// The port defaults to 2379; the path is the key prefix (a "/" is added);
// the tls_* parameters (tls_ca, tls_cert, tls_key, tls_server_name,
// tls_insecure_skip_verify) switch to TLS. lock.Open makes no round trip:
// the client is made, and logs in, at the Locker's first call.
//
// # Authentication
//
// A Locker opened from a URL with a user logs in itself, not through
// clientv3's Config.Username: it sends Authenticate with no token, and a
// call refused for its token (a member that restarted forgets its simple
// tokens; a JWT expires) logs in again and is sent once more (one
// refused for an older auth revision is first sent again as it is: a
// simple token is still good after a change of roles). etcd's
// client v3.6 sends its stale token with the Authenticate meant to
// replace it, which etcd before 3.5 refuses (etcd-io/etcd#12165): a
// client given to New with Username and Password then fails every call
// after such a member restarts, until it is made again. With etcd 3.4,
// give New a client on a cluster run with JWT tokens (--auth-token
// jwt,...: they outlive a restart), or open the Locker by URL.
//
// # Clusters
//
// One bad member of a cluster (paused, cut off with its connection open,
// slow) costs a request at most a third of what is left of its call's
// context (2 s when it has no deadline) before the request goes to the
// next member: reads, keep-alives and lease requests are sent again, and
// so is a grant's write, which tells its own landed write; other writes
// are made once and their caller judges. A client made from a URL also
// sets gRPC's keep-alive (10 s, 3 s), which drops a silent member's
// connection; give a client made for New DialKeepAliveTime and
// DialKeepAliveTimeout too. The watch stream asks for progress every
// second and starts over, on the next member, after 3 s of silence.
//
// # As
//
// lock.As gives the *clientv3.Client (for a Locker opened from a URL,
// once its first call made it).
//
// # Errors
//
// A TTL under a second is refused with lock.ErrInvalid. Backend failures
// are the client's errors, wrapped by lock with the key. Requests do not
// wait for a connection: while no member answers, an attempt fails at
// once with the connection's error (a refused certificate says so),
// marked unreachable, and lock follows its outage rule (package lock,
// Outages): a Try call fails with lock.ErrUnavailable, a waiting Lock
// tries again until its context ends. A queued Lock rides out failures
// (an election, a member's death) in its place for 15 s first.
package etcd
