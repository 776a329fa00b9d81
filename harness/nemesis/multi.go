package nemesis

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Multi-key sets (Locker.LockMany, TryLockMany): a worker takes 2 or 3
// of the hot keys, given in random order, so that sets overlap each other
// and the single-key leases. Each member is a lease like any other for
// the checker (overlap, tokens, writes, Done), recorded per key. What is
// particular to sets is all or nothing: a failed or cancelled attempt
// must leave none of its keys held. After such an attempt the worker
// reads its keys' holders (Inspect, where the driver has it) at once and
// again once Target.Bound and Recovery have passed: a holder found both
// times, with no server fault nor frozen process meanwhile (nor within
// Recovery before), outlived every grant that no one holds (a reply lost,
// an attempt given up, whose clean-up a server fault holds up), so it
// must be a lease handed to some worker. It is reported
// as a "multi-held" event, and the Recorder, at the end of the run, finds
// a violation (multi-partial) when no lease of the run has its owner
// token: a set's member kept by an attempt that failed.

// pMulti is the chance that a worker's step is a multi-key attempt.
const pMulti = 0.08

// multiTimeouts are LockMany's: longer than a Lock's mostly, since a set
// waits for each of its hot keys in turn.
var multiTimeouts = ms(150*time.Millisecond, 1500*time.Millisecond, 3*time.Second, longWait)

// multiSet picks 2 or 3 distinct hot keys in random order.
func (w *worker) multiSet() []string {
	keys := slices.Clone(w.env.keys)
	w.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:min(len(keys), 2+w.rng.IntN(2))]
}

// multi makes one LockMany or TryLockMany of a random set and holds what
// it gets; it reports whether it got the set.
func (w *worker) multi(in *lockerInst) bool {
	set := w.multiSet()
	ttl, renew, opts := w.lockOpts()
	op, timeouts, pCancel := "lockmany", multiTimeouts, 0.25
	if w.chance(0.5) {
		op, timeouts, pCancel = "trylockmany", tryTimeouts, 0.1
	}
	c := w.newCallCtx(timeouts, pCancel)
	clk, s := w.env.clk, w.env.sink
	start := clk.Now()
	var m *lock.MultiLease
	var err error
	if op == "lockmany" {
		m, err = in.lk.LockMany(c.ctx, set, opts...)
	} else {
		m, err = in.lk.TryLockMany(c.ctx, set, opts...)
	}
	end := clk.Now()
	limit := c.end()
	c.release()
	s.Ops(1)
	s.Stat(op, 1)
	w.checkReturn(op, set[0], start, end, limit, "its context ended")
	if err != nil {
		w.failed(op, set[0], err)
		w.checkLeftovers(in, set, end)
		return false
	}
	s.Stat(op+"-granted", 1)
	if m.Atomic() {
		s.Stat(op+"-atomic", 1)
	}
	var members []*liveLease
	for _, lease := range m.Leases() {
		if l := w.granted(in, lease, op, lease.Key(), exclusive, ttl, renew, start); l != nil {
			members = append(members, l)
		}
	}
	w.holdSet(members, w.holdTime(ttl))
	for _, l := range members {
		l.markUnlocking(clk, s, "unlock set")
	}
	uc := w.newCallCtx(unlockTimeouts, 0.05)
	ustart := clk.Now()
	uerr := m.Unlock(uc.ctx)
	uend := clk.Now()
	ulimit := uc.end()
	uc.release()
	s.Ops(1)
	w.checkReturn("unlock set", set[0], ustart, uend, ulimit, "its context ended")
	for _, l := range members {
		s.Event(Event{At: uend, Kind: "unlocked", Key: l.key, Lease: l.id, Text: short(uerr)})
		if !closed(l.lease.Done()) && !in.isClosing() {
			s.Violate(Violation{Kind: "unlock-open", At: uend, From: ustart, Key: l.key, Proc: w.env.proc, Lease: l.id,
				Text: fmt.Sprintf("key %q: Unlock of the set of lease %s returned (%s) with its Done open", l.key, l.id, short(uerr))})
		}
		l.observe(clk, s)
	}
	return true
}

// holdSet holds the members of a set for holdFor: each written to while
// it is held, until one is not or holdFor passes.
func (w *worker) holdSet(members []*liveLease, holdFor time.Duration) {
	clk, s := w.env.clk, w.env.sink
	t := time.NewTicker(writeEvery)
	defer t.Stop()
	until := time.Now().Add(holdFor)
	for {
		for _, l := range members {
			if !l.observe(clk, s) {
				return
			}
			s.Write(l.key, l.id, l.granted, l.token)
		}
		if time.Now().After(until) {
			return
		}
		select {
		case <-t.C:
		case <-w.env.stop:
			return
		}
	}
}

// checkLeftovers reads the holders of set after an attempt at it failed
// (at end), and again after Bound and Recovery have passed, on the slot's
// Locker of the moment; it reports each holder found both times as a
// multi-held event (see above). Drivers without Inspect are not read.
func (w *worker) checkLeftovers(in *lockerInst, set []string, end Stamp) {
	if in.lk.Supports(lock.Inspect) != nil {
		return
	}
	first := holders(in, set)
	if len(first) == 0 {
		return
	}
	seen := w.env.clk.Now()
	w.env.sink.Stat("multi-leftover-read", 1)
	wait := w.env.tg.Bound + w.env.tg.Recovery
	if wait <= 0 {
		wait = 2 * slices.Max(w.env.tg.LockTTLs)
	}
	w.leftovers.Add(1)
	go func() {
		defer w.leftovers.Done()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.env.stop:
			return
		}
		now := w.slot.current()
		if now == nil {
			return
		}
		second := holders(now, set)
		for h := range first {
			if second[h] {
				w.env.sink.Event(Event{At: w.env.clk.Now(), From: seen, Kind: "multi-held", Key: h.key, Lease: h.owner,
					Text: fmt.Sprintf("held by owner %s since before the failed set attempt that ended at %v, and still %v later", h.owner, end, wait)})
			}
		}
	}()
}

// heldBy is one holder of a key, as Inspect tells it.
type heldBy struct{ key, owner string }

// holders returns the holders of keys that dlock made (not foreign ones),
// as one Inspect of each key through in finds them; a failed Inspect
// gives none for its key.
func holders(in *lockerInst, keys []string) map[heldBy]bool {
	out := map[heldBy]bool{}
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := in.lk.Inspect(ctx, k)
		cancel()
		if err != nil {
			continue
		}
		for _, h := range st.Holders {
			if !h.Foreign {
				out[heldBy{k, h.Owner}] = true
			}
		}
	}
	return out
}
