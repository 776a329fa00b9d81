package nemesis

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// electionKey is the name of the run's leader election (lock.Election):
// a key of its own, which only campaigns take, so that terms follow one
// another rather than locks of a hot key.
const electionKey = "election"

// pElection is the chance that a worker's step is an election operation.
const pElection = 0.1

// isTerm reports whether l is a leader's term: a lease of the election's
// key that a campaign returned.
func isTerm(l *LeaseRec) bool {
	return l.Key == electionKey && (l.Op == "campaign" || l.Op == "trycampaign")
}

// electionStep makes an election operation: a campaign that waits, one
// that does not, or, where the Locker stores notes, an observation.
func (w *worker) electionStep(in *lockerInst) bool {
	switch n := w.rng.IntN(10); {
	case n < 2 && in.lk.Supports(lock.Notes) == nil:
		w.observeElection(in, between(w.rng, 100*time.Millisecond, 800*time.Millisecond))
		return true
	case n < 7:
		return w.campaign(in, "campaign")
	default:
		return w.campaign(in, "trycampaign")
	}
}

// campaign campaigns in the election, announcing the worker's name, and
// leads the term it wins. It reports whether it won one.
func (w *worker) campaign(in *lockerInst, op string) bool {
	e, err := in.lk.Election(electionKey)
	if err != nil {
		w.failed(op, electionKey, err)
		return false
	}
	ttl, renew, opts := w.lockOpts()
	timeouts, pCancel := lockTimeouts, 0.25
	if op == "trycampaign" {
		timeouts, pCancel = tryTimeouts, 0.1
	}
	c := w.newCallCtx(timeouts, pCancel)
	clk := w.env.clk
	start := clk.Now()
	var term *lock.Lease
	if op == "campaign" {
		term, err = e.Campaign(c.ctx, w.name, opts...)
	} else {
		term, err = e.TryCampaign(c.ctx, w.name, opts...)
	}
	end := clk.Now()
	limit := c.end()
	c.release()
	w.env.sink.Ops(1)
	w.checkReturn(op, electionKey, start, end, limit, "its context ended")
	if err != nil {
		w.failed(op, electionKey, err)
		return false
	}
	w.env.sink.Stat("terms", 1)
	if l := w.granted(in, term, op, electionKey, exclusive, ttl, renew, start); l != nil {
		w.lead(in, l, ttl, renew)
	}
	return true
}

// lead acts as the leader of term l: it writes to the fenced resource
// with the term's token while the term lasts, for a while, then resigns,
// or, some of the time when the term is not renewed, dies (leaves the
// term to expire, as a crashed leader does: its process still watches
// Done, which must close before another candidate is elected).
func (w *worker) lead(in *lockerInst, l *liveLease, ttl time.Duration, renew bool) {
	keepAlive := !renew && w.chance(0.5)
	w.holdLoop(in, l, w.holdTime(ttl), nil, keepAlive, nil)
	switch {
	case closed(l.lease.Done()):
		if w.chance(0.5) {
			w.unlock(l) // must say the term is gone, at once
		}
	case !renew && !keepAlive && w.chance(0.5):
		w.env.sink.Event(Event{At: w.env.clk.Now(), Kind: "abandon", Key: l.key, Lease: l.id, Text: "a leader that dies: its term left to expire"})
	default:
		w.unlock(l) // resign
	}
}

// observeElection follows the election's leaders for d
// (Election.Observe): the terms it is shown must increase (a zero Leader,
// no leader, may come between), each with its leader's announcement, and
// the channel must close by the end of its context. It reports whether it
// was shown a leader.
func (w *worker) observeElection(in *lockerInst, d time.Duration) bool {
	const op = "observe"
	e, err := in.lk.Election(electionKey)
	if err != nil {
		w.failed(op, electionKey, err)
		return false
	}
	clk := w.env.clk
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	dl, _ := ctx.Deadline()
	start := clk.Now()
	seen, err := e.Observe(ctx)
	if err != nil {
		w.failed(op, electionKey, err)
		return false
	}
	var last uint64
	for ld := range seen {
		if ld.Term == 0 {
			continue
		}
		if ld.Announcement == "" || ld.Term < last {
			t := clk.Now()
			w.env.sink.Violate(Violation{Kind: "term", At: t, From: start, Key: electionKey, Proc: w.env.proc,
				Text: fmt.Sprintf("%s observed leader %q (owner %s) in term %d, after term %d: terms must increase, each with its announcement",
					w.name, ld.Announcement, ld.Owner, ld.Term, last)})
		}
		last = max(last, ld.Term)
	}
	w.env.sink.Ops(1)
	w.env.sink.Stat("observed", 1)
	w.checkReturn(op, electionKey, start, clk.Now(), clk.At(dl), "its context ended")
	return last > 0
}

// firstObserve makes, where the Locker stores notes, the process's first
// observation of the election (procEnv.observed), 800 ms long, tried
// again (by one worker at a time) until it is shown a leader: a short
// run's random observations, one step in fifty, can miss every term. It
// reports whether it made one.
func (w *worker) firstObserve(in *lockerInst) bool {
	if w.env.observed.Load() != 0 || in.lk.Supports(lock.Notes) != nil || !w.env.observed.CompareAndSwap(0, 1) {
		return false
	}
	if w.observeElection(in, 800*time.Millisecond) {
		w.env.observed.Store(2)
	} else {
		w.env.observed.Store(0)
	}
	return true
}
