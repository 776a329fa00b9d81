// Package zookeeper is the dlock driver for Apache ZooKeeper: exclusive
// and shared (read/write) locks built the way Apache Curator's recipes
// build them, and counting semaphores in the same queue, on one server or
// an ensemble.
//
//	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181"}, 10*time.Second)
//	locker := zookeeper.New(conn, &zookeeper.Options{SessionTimeout: 10 * time.Second})
//	// or: locker, err := zookeeper.Dial(ctx, servers, nil)
//	// or: locker, err := lock.Open(ctx, "zookeeper://zk1:2181,zk2:2181/app/locks")
//	lease, err := locker.Lock(ctx, "orders/42")
//
// RLock and TryRLock grant shared leases, and Acquire and TryAcquire the
// permits of counting semaphores (see Semaphores); Resume and WithOwner
// are refused with lock.ErrUnsupported and the reason. docs/wire/zookeeper.md in the
// repository is the wire format.
//
// # The recipe
//
// A key is a node, Root + "/" + EscapeKey(key), created on demand as a
// container node (ZooKeeper 3.5.3 or later), which the server deletes once
// it is empty again, at its next container check (every 60 s by default:
// znode.container.checkIntervalMs); so does the root. A key used once thus
// leaves nothing once its requests are gone, and its tokens still grow
// when it is used again (they are zxids). A request is ephemeral: a
// release deletes it, and a session's end deletes the rest. A lock
// request is an ephemeral sequential child of the key's node,
//
//	_c_<owner>-lock-<seq>         exclusive
//	_c_<owner>-read-lock-<seq>    shared
//
// where <owner> is the request's 32 hex digits and <seq> the sequence
// number ZooKeeper appends. An exclusive request is granted when no child
// has a smaller sequence number; a shared one when no exclusive child (or
// permit: see Semaphores) has. A request that is not granted watches only
// the nearest child that blocks it (an exclusive one its predecessor, a
// shared one the nearest earlier exclusive one or permit), so a release
// wakes the next waiter and no herd: waiters are served in arrival order,
// and a waiting writer is not overtaken by readers that come after it. Ephemeral nodes die with their session, so
// a crashed holder frees its keys when the server expires its session.
//
// The names are those of go-zookeeper's zk.Lock and Curator's
// InterProcessMutex ("_c_<guid>-lock-<seq>"; both order children by the
// number after the last "lock-"), so a zk.Lock or Curator mutex on the
// node of the same key excludes dlock's leases, shared or exclusive, and
// is excluded by them: those recipes take dlock's read nodes for ordinary
// lock nodes (they wait for readers), and dlock takes every lock node it
// did not name itself for an exclusive one (readers wait for them). Do not
// mix in Curator's InterProcessReadWriteLock: its readers wait only for
// its own "__WRIT__" nodes, so they would not wait for dlock's writers.
//
// "_c_<owner>-" is the protected prefix of Curator's protection mode: when
// the reply to a create is lost (the connection broke after the server
// applied it), the driver syncs with the leader, lists the key's children
// and finds its node by the prefix, rather than leaving it in the queue.
//
// # Semaphores
//
// A permit is a lock node in the key's one queue, beside the exclusive and
// shared ones:
//
//	_c_<owner>-permit-<N>-lock-<seq>
//
// where N is the semaphore's limit in decimal. zk.Lock (which orders
// children by the number after the last "-") and Curator's mutex (by the
// number after "lock-") take it for one of their own lock nodes, so their
// locks, and dlock's exclusive and shared leases, of the same key exclude
// permits and are excluded by them, and waiters of every kind are served
// in arrival order. Older dlock versions read it as an exclusive node.
//
// The rule is the memory driver's: with the children in sequence order, a
// permit at index i is granted when every node before it is a permit and
// i < N; an exclusive node waits for every node before it, a shared one
// for every node before it that is not shared (permits included). The
// granted nodes are thus always a prefix of the queue: grants follow the
// sequence, and the tokens (czxids, which increase with it) of successive
// grants increase. A permit whose N differs from that of a permit before
// it, granted or waiting, is refused with lock.ErrInvalid naming both
// limits, and its node deleted; a permit that comes later with another N
// is refused by its own check.
//
// A grant depends on the children alone: a permit waiter's turn never
// waits for another client's process to act or to announce anything. A
// waiter watches earlier nodes that keep it blocked for as long as they
// all exist (getData watches, which fire when the node goes), so that
// every departure that may be its turn wakes it, and no other:
//
//   - a permit watches the N permits just before it, or, when a node that
//     is not a permit comes first, that node alone. One node could not do:
//     any N departures among the nodes before it may be its turn, whoever
//     is granted. A departure thus wakes at most the N permit waiters just
//     behind it, never the whole queue, and an arrival wakes none;
//   - exclusive and shared waiters watch as for locks (the predecessor,
//     the nearest earlier node that is not shared).
//
// A waiter woken for nothing (a departure that left N nodes before it)
// lists the queue, keeps the watches that have not fired and sets one on
// the node that now blocks it in the departed one's place.
//
// Permits are leases like the locks: valid for the session timeout,
// renewed by checking the node, returned at the holder's session expiry
// when it crashes, never resumed (see Not offered). Round trips: as
// TryLock and Lock; a permit waiter sets its N watches in one round trip.
//
// Curator's InterProcessSemaphoreV2 layout (leases under <path>/leases, a
// mutex under <path>/locks) is not used, and does not mix with dlock's
// permits: its lease nodes are children of another node than the key's
// lock nodes, so its permits would not exclude locks of the same key; it
// stores no limit, so the limits of a mixed fleet could not be checked;
// and its waiter holds the internal mutex while it waits on a children
// watch, so every later arrival waits for that mutex.
//
// # No orphans
//
// A node whose owner gave up on it would stay queued as long as its
// session lives, blocking every later waiter. So every path that gives up
// on a node deletes it: a waiter whose context ends or that fails, a
// TryLock that found the key held, a first attempt whose caller stopped
// waiting while its create was under way (the attempt deletes the node
// when the create's reply comes), a create whose reply was lost, a failed
// Unlock, a lease lost while the session may live on. When the deletion
// itself fails, the Locker's background goroutine retries it for as long
// as the session may be alive. Close of a Locker made by Dial or
// lock.Open closes the session, which deletes its nodes at once.
//
// # Round trips
//
//   - TryLock, TryRLock: 1 when granted, 2 when held. The create and a
//     listing of the key's children are sent together, and ZooKeeper
//     answers a session's requests in order, so the listing shows the new
//     node. The create is a multi of the create and a setData (no data)
//     of the key node: a multi is one transaction with one zxid, so the
//     key node's new mzxid is the lock node's czxid, the fencing token,
//     with no read of the node. When the key is held, the node is deleted.
//   - Lock, RLock: 1 when the key is free: the setData of the create's
//     multi returns the key node's Stat, and a child count of 1 means the
//     new node is alone, so no listing is sent. Otherwise a listing (1
//     round trip) and a watch on the blocker (1); when it goes, the server
//     notifies the waiter, which lists the children again (1) and is
//     granted. A waiter whose listing showed one node before its own
//     lists no more: sequence numbers only grow, so once that node's
//     deletion is notified the waiter is first, and it is granted at
//     once, unless a watch on its own node, set with the blocker's, fired
//     first (its node deleted while it waited: it lists again; zk.Lock
//     and Curator always list again). lock drives the wait
//     (driver.Queuer): Join creates and lists, the watch's notification
//     wakes lock, whose Check lists again (or not, as above); a Check
//     before the notification sends nothing. Each step makes its
//     requests in a row, so on a busy machine a hot key's throughput is
//     bounded by the hand-offs' latency (release, notification, listing,
//     grant).
//   - Unlock: 1 (delete).
//   - Renewal: 1 per lease (exists: the node is still there), or one multi
//     of check operations per batch of leases (lock batches renewals that
//     are due together).
//   - Session upkeep: while a Locker holds or waits for leases, it sends a
//     sync when no write proved its session alive for a third of the
//     session timeout, about every 0.3 of it when nothing else writes (see
//     Sessions and TTLs).
//
// Compared with go-zookeeper's zk.Lock (create, then list, then delete:
// three round trips in a row), Lock+Unlock needs two. bench_test.go
// measures both against three raw round trips.
//
// # Sessions and TTLs
//
// A ZooKeeper grant has no expiry of its own: it lives as long as the
// session that created it, and the server expires a session that it has
// not heard from for the session timeout. The session timeout is
// therefore the liveness bound: a crashed holder frees its keys within
// it, whatever the lease's TTL.
//
// The leader expires sessions, and hears from a session that talks to a
// follower only through that follower: the follower notes every request
// it answers (reads and pings too) and reports those sessions in its reply
// to the leader's next ping, every half tick; a request it forwards does
// not count on the leader. A write or sync answered through a follower
// shows that the follower's link to the leader worked when it was
// forwarded, so the requests answered a ping interval before it was sent
// (reportLag: 0.3 of the session timeout, a tick being half the timeout at
// most) were reported: the leader cannot expire the session before the
// latest of those was sent plus the session timeout. The write or sync
// itself proves nothing yet, as the follower may be cut off right after
// answering it. A connection's handshake counts too: the leader touches a
// session when it is created or resumed on any server. While the session
// lasts, idle or not, a background goroutine (one per Locker, not per
// lease) keeps such proof fresh with a sync when it is a fifth of the
// session timeout old and a request is old enough to be proven, so that a
// grant, which waits for proof at most half the timeout old, need not
// wait after an idle spell; and:
//
//   - when the last proof is older than the session timeout minus a
//     drift margin (driver.DriftMargin), which happens when the connection is
//     lost, every lease of the Locker ends (Done closes, Err wraps
//     lock.ErrLost): the server may expire the session any moment now,
//     and then grant the keys to another client;
//   - when go-zookeeper reports the session expired, or has replaced it
//     with a new one, every lease of the old session ends at once (Err
//     wraps zk.ErrSessionExpired);
//   - when the connection comes back before the deadline (the session
//     survives, possibly on another server of the ensemble), the leases go
//     on, once a check finds that each one's node still exists; a lease
//     whose node is gone ends.
//
// Waiters ride out a lost connection the same way: they keep their node
// and go on when the connection returns, or queue again if the session
// expired meanwhile.
//
// lock's options map onto this as follows:
//
//   - A lease's validity (Lease.Validity, which Lease.Deadline is counted
//     with) is the session timeout, whatever the TTL, counted from the
//     proof: the session is what the lease rests on. Counted from the
//     grant or refresh, as lock counts it, that is the timeout less the
//     proof's age then (and a little less, so that lock's drift margin
//     ends the lease no later than the monitor would). A grant waits
//     until the proof is at most half the timeout old, which the
//     heartbeat keeps it (on a Locker just made by New it takes up to 0.3
//     of the timeout: a sync, and another once the first is old enough to
//     be proven); its validity is then at least half the timeout. A refresh
//     checks that the lease's node still exists with a read, which proves
//     nothing to the leader: its validity is counted from the proof the
//     heartbeats keep, which is 0.3 to 0.5 of the timeout old, so it is
//     about 0.5 to 0.7 of the timeout (a grant right after Dial, whose
//     handshake is a fresh proof, gets nearly all of it). lock renews a
//     third of the way to the deadline (lock's Renewal), so a renewal
//     comes every 0.17 to 0.23 of the session timeout (1.7 to 2.3 s with
//     a 10 s session); a node deleted behind the holder's back ends its
//     lease by the next one. The TTL is not used.
//   - With auto-renewal off, a lease lasts its grant's validity (at least
//     half the session timeout), or less if the session is at risk first;
//     then the Locker deletes its node.
//   - Lock waits in the queue until its context ends. A retry strategy
//     given explicitly (Options.Retry, lock.WithRetry) makes it retry
//     single attempts, as TryLock makes, by that strategy instead: no
//     queue, no FIFO order, but NoRetry and LimitRetry bound the call.
//   - ReleaseTimeout and Logger work as everywhere (go-zookeeper's own
//     messages go to the Logger at debug level, for Lockers from Dial).
//
// A Locker from New does not get go-zookeeper's event channel (it stays
// the caller's): the driver watches conn.State and conn.SessionID every
// twentieth of the session timeout (at most 100 ms) while it has work,
// which is how it learns of expiry; a Locker from Dial also hears
// go-zookeeper's session events as they happen. go-zookeeper does not tell
// the negotiated session timeout: Dial reads it from the server's connect
// response, and New should be told it (Options.SessionTimeout). Without it
// New assumes AssumedSessionTimeout (4 s), the least a server with
// ZooKeeper's default tickTime grants. Overstating it is unsafe (leases
// would be thought valid after the server expired their session); set it
// for servers with a lower tickTime or minSessionTimeout.
//
// In an ensemble, sessions survive a leader change when clients reconnect
// within the session timeout: a new leader restarts every session's timer.
// Killing the leader while leases are held yields no double grant: each
// lease either survives or ends (Done closed) before another client can be
// granted its key (ensemble_test.go), and a follower frozen right after
// answering a sync does not make a lease outlive its node
// (TestEnsembleFollowerProof).
//
// # Fencing
//
// The token is the lock node's czxid, the zxid of the transaction that
// created it. Zxids increase across every write of the whole ensemble,
// across restarts and leader changes (the epoch is in the high 32 bits),
// so tokens strictly increase per key, for exclusive and shared grants and
// permits alike, and there is no counter to lose. What fencing adds: no lock
// service can stop a holder that was paused (GC, VM migration, SIGSTOP)
// past its session from acting on a lease it no longer has; its Done is
// closed by then, but it may write before it looks. A resource that
// remembers the largest token it has seen and refuses smaller ones turns
// such a write into a refusal.
//
// # Inspect
//
// lock.Inspect syncs, lists the key node's children and reads each lock
// node's stat (the requests sent together), and judges the nodes by the
// rule the driver grants with: in sequence order, those nothing before
// them blocks hold the key, the rest wait, first in line first. Each comes
// with its owner (from the node's name), mode, limit, token (czxid) and
// Since, the node's creation (ctime, the leader's clock): when its request
// was made, so a holder that waited was granted later. How long a grant
// lasts cannot be told: as long as its session. Other clients' lock nodes
// (zk.Lock's, Curator's) are foreign holders or waiters, exclusive, named
// by their node. Nothing is created, written, watched or deleted.
//
// # Not offered
//
// Resume (lock.Locker.Resume, Lease.Detach), of locks and permits alike,
// and named owners (lock.WithOwner, reentrant holds) are refused with
// lock.ErrInvalid. A
// grant is an ephemeral node of one client session: another session can
// neither keep it alive nor take it over, and a hold added from another
// session could not end with its own session, so a crashed holder's hold
// would keep the key for as long as the node's session lives.
//
// # Keys and nodes
//
// Every key lock accepts maps to one node name, without collisions: see
// EscapeKey. Options.Root (default DefaultRoot) is the parent of the key
// nodes; missing ancestors are created as container nodes.
//
// # ACLs
//
// Options.ACL is the ACL of the nodes the driver creates (default
// zk.WorldACL(zk.PermAll)). With Options.Username and Options.Password (a
// ZooKeeper digest identity, also user:password@ in URLs) it defaults to
// zk.DigestACL(zk.PermAll, user, password). ZooKeeper checks the right to
// delete a node on its parent, so the ACL on the key nodes is what keeps
// other identities from deleting lock nodes (or queueing on the key):
// this holds for key nodes this identity created. Where a key node made
// by another client lets the identity create children but not write the
// key node, the driver falls back to a plain create and reads the czxid
// in the listing's round trip. With the default digest ACL, the root and
// its ancestors, when the driver creates them, get the world ACL instead,
// so Lockers of other identities (or none) can keep their own keys under
// the same root; an explicit Options.ACL applies to every node created.
//
// # URLs
//
//	zookeeper://[user:password@]host[:port][,host[:port]...][/root][?params]
//
// opens a Locker as Dial does, but without waiting for the session (see
// Connecting). The hosts are one ensemble (default port 2181; IPv6
// literals are not accepted by Go's URL parser: use names). The path is
// Options.Root (DefaultRoot when empty or "/"). user:password
// is a ZooKeeper digest identity (see ACLs). Parameters:
//
//	session_timeout=DURATION  the session timeout to ask for (default 10s)
//
// the TLS parameters every driver shares, any of which makes the
// connections TLS (Options.TLS; the servers' secureClientPort):
//
//	tls_ca=FILE                    PEM CA certificates that verify the servers
//	                               (default: the system's roots)
//	tls_cert=FILE&tls_key=FILE     a PEM client certificate and its key, both or
//	                               neither (for ssl.clientAuth=need)
//	tls_server_name=NAME           the name verified (and sent as SNI) for every
//	                               server; default: each server's host in the URL
//	tls_insecure_skip_verify=BOOL  true does not verify the servers: for tests only
//
// plus autorenew, which every scheme accepts (see lock.Open). Unknown
// parameters are errors, and so is ttl: a grant lasts as long as its
// session (see Sessions and TTLs), so session_timeout is the parameter
// that bounds how long a crashed holder keeps its keys.
//
// # Connecting
//
// lock.Open does not wait for ZooKeeper: it resolves the servers' names
// (go-zookeeper does, for 3s at most) and returns a Locker whose
// connection is made in the background, by go-zookeeper, which tries the
// servers in turn (1s per attempt at most, a pause of 1s after each round)
// until Close. A call that would send a request before the first session
// is up, and authenticated with the digest identity if there is one,
// waits for it, and fails (lock.ErrNotAcquired with lock.ErrUnavailable,
// or Inspect's error, wrapping the cause; a waiting Lock then tries
// again, as package lock's Outages says) at the first of:
//
//   - each server has failed a connection attempt since the call began
//     (refused, unreachable, timed out, or closed by a server that is not
//     serving yet): the error says the servers are unreachable and wraps
//     the last attempt's (errors.Is(err, syscall.ECONNREFUSED), say), as
//     the first call on a Redis or memcached Locker reports an outage;
//   - every server's last attempt failed TLS for a reason another attempt
//     will not mend: the error wraps crypto/tls's (see Options.TLS);
//   - the session timeout asked for has passed (servers that accept
//     connections but give no session, a server without a quorum say);
//   - the call's context ends.
//
// So a call with context.Background() is bounded too. The Locker keeps
// connecting: a call made once a server is up gets the session. After the
// first session, go-zookeeper reconnects (and authenticates) on its own,
// and the leases ride out a lost connection as Sessions and TTLs says.
// Dial waits for the first session the same way before it returns.
//
// # As
//
// locker.As(&conn) with conn a *zk.Conn gives the connection.
//
// # Errors
//
// Errors are lock's (see lock.Error): ErrNotAcquired, ErrNotHeld, ErrLost,
// ErrClosed and ErrInvalid, wrapping go-zookeeper's errors where the
// server or the connection failed (zk.ErrNoAuth when an ACL refuses,
// zk.ErrSessionExpired in the Err of leases lost to an expired session,
// zk.ErrConnectionClosed, ...). ErrInvalid, before any I/O, for: New with
// a nil connection, a negative Options.SessionTimeout or Options.TLS
// (New cannot make its caller's connection TLS); a Root that is not
// an absolute ZooKeeper path; Username without Password; a malformed URL,
// host or session_timeout; an unknown URL parameter; a TLS file that is
// missing or unreadable, a certificate without its key, or a bad boolean.
package zookeeper
