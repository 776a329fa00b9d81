package rediswatch

import (
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/redisx"
)

// Stats counts events of a Locker's driver, most of which a healthy system
// keeps rare; get a snapshot with lock.As:
//
//	var s rediswatch.Stats
//	locker.As(&s)
type Stats struct {
	// GrantAborts counts grant transactions aborted because the lock key or
	// its counter changed between WATCH and EXEC (another client took the
	// key first). Each is one failed attempt that lock retries like a held
	// key. Aborted set transactions (LockMany, TryLockMany) count here
	// too; a set is tried again up to MaxAttempts times, then refused as
	// held.
	GrantAborts uint64
	// HandOvers counts releases that handed the key to the first waiter in
	// line (not rare: on a busy key, nearly every release).
	HandOvers uint64
	// Claims counts hand-overs a waiter took in one round trip, reading
	// its grant without a transaction of writes (woken by the release's
	// message; the others take two).
	Claims uint64
	// ReleaseAborts and RefreshAborts count aborted release and refresh
	// transactions; each is retried, up to MaxAttempts per call.
	ReleaseAborts, RefreshAborts uint64
	// GaveUp counts Release and Refresh calls that failed with ErrConflict.
	GaveUp uint64
	// BatchFallbacks counts batch refresh transactions that were aborted
	// and redone in parts: without the keys they found not held, or in two
	// halves (a single lease as by Refresh).
	BatchFallbacks uint64
	// Reconnects counts reconnections of the release subscription; every
	// waiter is woken once after each, since a release may have been
	// missed meanwhile.
	Reconnects uint64
}

type counters struct {
	grantAborts, handOvers, claims, releaseAborts, refreshAborts, gaveUp, batchFallbacks atomic.Uint64
}

func (c *counters) snapshot(n *redisx.Notifier) Stats {
	return Stats{
		GrantAborts:    c.grantAborts.Load(),
		HandOvers:      c.handOvers.Load(),
		Claims:         c.claims.Load(),
		ReleaseAborts:  c.releaseAborts.Load(),
		RefreshAborts:  c.refreshAborts.Load(),
		GaveUp:         c.gaveUp.Load(),
		BatchFallbacks: c.batchFallbacks.Load(),
		Reconnects:     n.Reconnects(),
	}
}
