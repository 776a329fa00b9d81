package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// Operations on a held lease's grant through another Locker of the
// worker's process, where the target resumes leases (Target.Resume):
//
//   - live-resume: Resume of the live lease's handle through the worker's
//     side Locker, with a TTL shorter or longer than the lease's and
//     renewal on or off. The second Lease must change nothing for the
//     first (Resume only ever extends the grant): the first is held on
//     past the second's TTL, and the second is detached at a random
//     moment of that, which leaves the grant to the first.
//   - race: on a side Locker opened for it, a Resume of the live lease's
//     handle (its lease detached at once, half of the time), a Lock of a
//     hot key, and Close, begun a random moment after them (within about
//     one Resume's time, so that Close lands inside some of them). A
//     Resume that fails, with ErrClosed or any other error, changes
//     nothing: the first lease is held on for a while, so that a grant it
//     lost is seen granted to another meanwhile.
//
// The Leases of one grant are one holder for the checker (LeaseRec.Grant);
// a resumed one counts as held only while the first does (liveLease's
// within), since the worker ends the grant through the first.

// The chances, per hold of a lease that is not a named owner's, of each
// operation.
const (
	pLiveResume = 0.06
	pRace       = 0.05
)

// grantOps may run one of the operations on l's grant, and reports false
// when the grant may have gone with the other Locker (a race whose Resume
// won, and whose lease its Close released): l's holder then stops acting
// as its holder.
func (w *worker) grantOps(in *lockerInst, l *liveLease, keepAlive bool) bool {
	if !w.env.tg.Resume || l.owner != "" || w.env.stopping() {
		return true
	}
	pLive, pR := pLiveResume, pRace
	if w.env.owes(func(o *owed) *atomic.Bool { return &o.liveResume }) {
		pLive = pOwed
	}
	if w.env.owes(func(o *owed) *atomic.Bool { return &o.race }) {
		pR = pOwed
	}
	switch x := w.rng.Float64(); {
	case x < pLive:
		w.liveResume(in, l, keepAlive)
	case x < pLive+pR:
		return w.race(in, l, keepAlive)
	}
	return true
}

// grantOwner is the owner token of lease's grant, from its Handle
// ("dlock1.MODE.OWNER.TOKEN.KEY", see lock.Lease.Handle).
func grantOwner(lease *lock.Lease) string {
	parts := strings.Split(lease.Handle(), ".")
	if len(parts) != 5 {
		return ""
	}
	return parts[2]
}

// resumeTTL is a TTL of the target's, shorter than orig half of the time
// (when there is one), else longer (when there is one).
func (w *worker) resumeTTL(orig time.Duration) time.Duration {
	var shorter, longer []time.Duration
	for _, d := range w.env.tg.LockTTLs {
		if d < orig {
			shorter = append(shorter, d)
		} else if d > orig {
			longer = append(longer, d)
		}
	}
	switch {
	case len(shorter) > 0 && (len(longer) == 0 || w.chance(0.5)):
		return pick(w.rng, shorter)
	case len(longer) > 0:
		return pick(w.rng, longer)
	}
	return orig
}

// resumeOpts picks a TTL for a second Lease of l's grant, and renewal.
func (w *worker) resumeOpts(l *liveLease) (time.Duration, bool, []lock.Option) {
	ttl, renew := w.resumeTTL(l.lease.TTL()), w.chance(0.5)
	opts := []lock.Option{lock.WithTTL(ttl)}
	if !renew {
		opts = append(opts, lock.WithDisableAutoRenew(true))
	}
	return ttl, renew, opts
}

// liveResume: see the file's comment.
func (w *worker) liveResume(in *lockerInst, l *liveLease, keepAlive bool) {
	side := w.sideLocker()
	if side == nil {
		return
	}
	ttl, renew, opts := w.resumeOpts(l)
	total := between(w.rng, ttl, ttl+l.lease.TTL())
	detachAt := between(w.rng, 0, total)
	// A Resume whose lease is dead on arrival (lost at once) leaves the
	// grant to l: the side Locker is not closed meanwhile.
	r, _ := w.resumeOf(side, l, "live-resume", ttl, renew, opts, w.newCallCtx(tryTimeouts, 0.1))
	if r == nil {
		// A failed Resume changed nothing: l is held on as planned.
		w.holdLoop(in, l, total, nil, keepAlive, nil)
		return
	}
	w.holdLoop(in, l, detachAt, nil, keepAlive, nil)
	w.detachTwin(r)
	w.holdLoop(in, l, total-detachAt, nil, keepAlive, nil)
}

// race: see the file's comment. It reports false when the Resume won and
// Close ended its lease, releasing the grant, which was l's too.
func (w *worker) race(in *lockerInst, l *liveLease, keepAlive bool) bool {
	clk, s := w.env.clk, w.env.sink
	w.sides++
	side, err := w.slot.openSide(fmt.Sprintf("%s/race%d", w.name, w.sides))
	if err != nil {
		return true
	}
	// Every random choice is made here: the racers run on goroutines.
	ttl, renew, opts := w.resumeOpts(l)
	detach := w.chance(0.5)
	rc := w.newCallCtx(tryTimeouts, 0)
	lk := w.raceLockPlan()
	closeAfter := w.raceCloseAfter()
	s.Stat("race", 1)
	l.pause(true)
	var wg sync.WaitGroup
	var r *liveLease
	var resumed bool
	began := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		if r, resumed = w.resumeOf(side, l, "race-resume", ttl, renew, opts, rc); r != nil && detach {
			w.detachTwin(r)
		}
	}()
	go func() { defer wg.Done(); w.raceLock(side, lk) }()
	waitPrecisely(closeAfter)
	side.closeAndCheck(w.env)
	wg.Wait()
	switch {
	case resumed: // Close came after the Resume returned: aim there
		w.raceResumed = w.resumeEnd.Sub(began)
	case w.raceResumed > 0: // Close came too early: aim later
		w.raceResumed += w.raceResumed / 5
	default:
		w.raceResumed = 2*closeAfter + time.Microsecond
	}
	if resumeTookGrant(resumed, r) {
		s.Stat("race-released", 1)
		if r == nil {
			s.Stat("race-released-doa", 1) // its lease dead on arrival
		}
		l.markUnlocking(clk, s, "its grant went with the Close of a Locker that resumed it")
		return false
	}
	l.pause(false)
	w.holdLoop(in, l, between(w.rng, 300*time.Millisecond, time.Second), nil, keepAlive, nil)
	return true
}

// resumeTookGrant says whether a race's Close may have released the
// grant of the lease it resumed: when the Resume succeeded (resumed) and
// its lease was not detached first. A lease dead on arrival (r nil, its
// Done closed when first observed, as the Close that ends it at once
// leaves it) counts: Resume returned it, so the Close released the grant
// for both Leases (docs/design.md, Resume), and the first Lease's Done
// stays open until its next renewal finds the grant gone, while another
// client may be granted the key.
func resumeTookGrant(resumed bool, r *liveLease) bool {
	if !resumed {
		return false // a failed Resume changes nothing
	}
	return r == nil || !errors.Is(r.lease.Err(), lock.ErrDetached)
}

// resumeOf resumes l's grant through side, records the lease it gives as
// a second Lease of l's grant (held only while l is), and returns it, or
// nil when Resume failed or its lease was dead on arrival; resumed says
// whether Resume returned a lease (dead on arrival or not). op names the
// operation in the statistics ("op" calls, "opd" leases got).
func (w *worker) resumeOf(side *lockerInst, l *liveLease, op string, ttl time.Duration, renew bool, opts []lock.Option, c *callCtx) (r *liveLease, resumed bool) {
	clk, s := w.env.clk, w.env.sink
	start, t0 := clk.Now(), time.Now()
	lease, err := side.lk.Resume(c.ctx, l.lease.Handle(), opts...)
	end := clk.Now()
	w.resumeEnd = time.Now()
	w.resumeLat = w.resumeEnd.Sub(t0)
	limit := c.end()
	c.release()
	s.Ops(1)
	s.Stat(op, 1)
	s.Event(Event{At: end, Kind: op, Key: l.key, Lease: l.id, Text: fmt.Sprintf("of %s through %s, ttl %v renew %v: %s", l.id, side.name, ttl, renew, short(err))})
	w.checkReturn(op, l.key, start, end, limit, "its context ended")
	if err != nil {
		w.failed(op, l.key, err)
		return nil, false
	}
	s.Stat(op+"d", 1)
	if lease.Key() != l.key || lease.Token() != l.token || lease.Limit() != l.limit {
		s.Violate(Violation{Kind: "resume-mismatch", At: end, From: start, Key: l.key, Proc: w.env.proc,
			Text: fmt.Sprintf("Resume of live lease %s on key %q (token %d, limit %d) by %s gave key %q token %d limit %d", l.id, l.key, l.token, l.limit, w.name, lease.Key(), lease.Token(), lease.Limit())})
	}
	r = w.grantedAs(side, lease, "resume", l.key, grantMode{shared: l.shared, limit: l.limit}, ttl, renew, l.id, "", "", start)
	if r != nil {
		r.mu.Lock()
		r.within = l
		r.mu.Unlock()
	}
	return r, true
}

// detachTwin ends r, a second Lease of a grant, by Detach, which leaves
// the grant to the first; r must then be over.
func (w *worker) detachTwin(r *liveLease) {
	clk, s := w.env.clk, w.env.sink
	r.markUnlocking(clk, s, "detach")
	start := clk.Now()
	_, err := r.lease.Detach()
	end := clk.Now()
	s.Ops(1)
	s.Event(Event{At: end, Kind: "detach", Key: r.key, Lease: r.id, Text: short(err)})
	if err == nil && (!closed(r.lease.Done()) || !errors.Is(r.lease.Err(), lock.ErrDetached)) {
		s.Violate(Violation{Kind: "detach-open", At: end, From: start, Key: r.key, Proc: w.env.proc, Lease: r.id,
			Text: fmt.Sprintf("key %q: Detach of lease %s returned with Done closed %v, Err %v", r.key, r.id, closed(r.lease.Done()), r.lease.Err())})
	}
	r.observe(clk, s)
}

// raceLockPlan is a race's Lock: its call, key, context and options.
type raceLockPlan struct {
	op, key string
	c       *callCtx
	ttl     time.Duration
	renew   bool
	opts    []lock.Option
}

func (w *worker) raceLockPlan() raceLockPlan {
	p := raceLockPlan{op: "trylock", key: pick(w.rng, w.env.keys)}
	timeouts := tryTimeouts
	if w.chance(0.5) {
		p.op, timeouts = "lock", lockTimeouts
	}
	p.ttl, p.renew, p.opts = w.lockOpts()
	p.c = w.newCallCtx(timeouts, 0)
	return p
}

// raceLock makes a race's Lock through side, and records what it gets,
// which the race's Close must end.
func (w *worker) raceLock(side *lockerInst, p raceLockPlan) {
	clk, s := w.env.clk, w.env.sink
	start := clk.Now()
	var lease *lock.Lease
	var err error
	if p.op == "lock" {
		lease, err = side.lk.Lock(p.c.ctx, p.key, p.opts...)
	} else {
		lease, err = side.lk.TryLock(p.c.ctx, p.key, p.opts...)
	}
	end := clk.Now()
	limit := p.c.end()
	p.c.release()
	s.Ops(1)
	s.Stat("race-"+p.op, 1)
	w.checkReturn("race-"+p.op, p.key, start, end, limit, "its context ended")
	if err != nil {
		w.failed("race-"+p.op, p.key, err)
		return
	}
	w.grantedAs(side, lease, "race-"+p.op, p.key, exclusive, p.ttl, p.renew, "", "", "", start)
}

// sideLocker is the worker's side Locker for live resumes, opened on
// first use (nil if it cannot be).
func (w *worker) sideLocker() *lockerInst {
	if w.side == nil {
		w.sides++
		in, err := w.slot.openSide(fmt.Sprintf("%s/side%d", w.name, w.sides))
		if err != nil {
			return nil
		}
		w.side = in
	}
	return w.side
}

// closeSide closes the worker's side Locker, if it opened one.
func (w *worker) closeSide() {
	if w.side != nil {
		w.side.closeAndCheck(w.env)
		w.side = nil
	}
}

// openSide opens a Locker over the slot's proxies, outside the slot.
func (s *pslot) openSide(name string) (*lockerInst, error) {
	return openSide(s.r.tg, s.addrs(), s.r.store, name)
}

// openSide opens a Locker over the slot's proxies, outside the slot.
func (s *cslot) openSide(name string) (*lockerInst, error) {
	return openSide(s.env.tg, s.addrs, nil, name)
}

func openSide(tg *Target, addrs []string, store *memory.Store, name string) (*lockerInst, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lk, err := tg.open(ctx, addrs, store)
	if err != nil {
		return nil, err
	}
	return &lockerInst{lk: lk, name: name}, nil
}

// waitPrecisely waits d: by sleeping when d is long, and by spinning when
// it is under a millisecond, which a timer cannot wait with any precision.
func waitPrecisely(d time.Duration) {
	if d >= time.Millisecond {
		time.Sleep(d)
		return
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// raceCloseAfter is when a race's Close begins, from the race's start.
// The window that matters is narrow: between the driver's Resume returning
// and lock registering the lease, microseconds. So Close aims at the moment
// the last race's Resume returned (raceResumed), give or take a quarter of
// it; before any race, uniform over twice the last Resume's time.
func (w *worker) raceCloseAfter() time.Duration {
	if at := w.raceResumed; at > 0 {
		return between(w.rng, at*3/4, at*5/4+time.Microsecond)
	}
	return between(w.rng, 0, 2*w.resumeLat+2*time.Microsecond)
}
