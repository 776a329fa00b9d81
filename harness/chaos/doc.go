// Package chaos tests what dlock's drivers guarantee when things go wrong,
// with faults injected for real, and proves that its checks can fail by
// running them on the seeds' broken lock algorithms.
//
// Lease-based locks cannot promise exclusion to a holder that pauses past
// its TTL; they can promise that the holder is told (Lease.Done), and that a
// resource checking fencing tokens never accepts a stale write. This
// package checks exactly that, per driver:
//
//   - Resource is a fenced resource: per key it accepts a write only if its
//     token is at least the highest it has accepted, and it records every
//     grant, write attempt, unlock, loss, kill and fault, stamped on one
//     monotonic clock. Holders in child processes report through the test
//     process, which stamps their events on that clock.
//   - Check judges a history: overlapping holders (and which overlaps no
//     frozen process excuses), stale writes accepted (must be 0) and
//     rejected (fencing at work), token regressions, and whether each lost
//     lease's Done closed before the key's next grant. It derives
//     staleness from the grant order, not from the tokens, so a broken
//     token is caught rather than trusted.
//   - Proxy is a TCP proxy that understands enough of RESP, memcached's
//     text protocol, ZooKeeper's and PostgreSQL's to lose the reply of one
//     chosen request after the server applied it, and to partition clients
//     from the server; on PostgreSQL it knows a prepared statement's SQL by
//     its name, and can delay or lose a LISTEN connection's notifications.
//     (Toxiproxy, the usual library, works on byte streams, cannot pair a
//     reply with its request, and would add about twenty modules to go.mod.)
//   - RedisResidue, MemcachedResidue, ZooKeeperResidue and
//     PostgresResidue find grants and leaks left on a backend after every
//     holder is gone.
//
// The tests hold the scenarios (a holder process frozen with SIGSTOP mid
// write or mid release, or killed; the server frozen, killed and
// restarted with and without persistence; lost grant, release and refresh
// replies; a partition; ZooKeeper session expiry and leader loss; memcached
// eviction), the drivers' and the negative controls' hookups, and the
// table of results.
//
// go test runs a short selection; DLOCK_CHAOS=full (make chaos) runs every
// scenario against every driver and control, and DLOCK_CHAOS_TABLE=FILE
// writes the table there. go test -short runs only the tests that need no
// server. The README's Safety section states per backend what is guaranteed
// and what is not.
package chaos
