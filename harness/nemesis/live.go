package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// parentProc names the test process in lease records; children have their
// own names.
const parentProc = "parent"

// DoneSlack is how long after its deadline a lease's Done may still be
// seen open before it counts as late: the lock's timer and this process's
// scheduling, on a busy machine.
const DoneSlack = 100 * time.Millisecond

// sink is where a process's workers report: the Recorder itself in the
// parent, the parent's Recorder over RPC in a child.
type sink interface {
	Grant(l LeaseRec)
	Held(id string, at, deadline Stamp)
	Unlocking(id string, at Stamp, what string)
	Done(id string, at Stamp, errText string)
	Event(e Event)
	Violate(v Violation)
	Ops(n int)
	Stat(name string, n int)
	Write(key, id string, granted Stamp, token uint64) bool
	Fault(f Fault)
	Starved(proc string, from, to Stamp)
}

// canary measures how late a goroutine of this process wakes, and reports
// the spells when it could not run (a busy machine): timing judgements
// are excused for the time a process was starved.
func canary(proc string, clk *Clock, s sink, stop <-chan struct{}) {
	const period, threshold = 10 * time.Millisecond, 20 * time.Millisecond
	t := time.NewTimer(period)
	defer t.Stop()
	due := time.Now().Add(period)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		if late := now.Sub(due); late > threshold {
			s.Starved(proc, clk.At(due), clk.At(now))
		}
		due = now.Add(period)
		t.Reset(period)
	}
}

// liveLease is a lease its process still watches: until its Done is seen
// closed, whatever its holder does.
type liveLease struct {
	id, key, proc string
	owner         string // a named owner's id (lock.WithOwner), or ""
	shared        bool
	limit         int // a permit's semaphore size, or 0
	token         uint64
	granted       Stamp
	lease         leaseView
	inst          *lockerInst

	mu        sync.Mutex
	unlocking bool // the holder called Unlock: it no longer acts
	doneSeen  bool
	late      bool // a late Done was reported
	// paused: its holder races another Locker over its grant, whose
	// outcome says whether the grant is still its own (see race): it is
	// not reported held meanwhile.
	paused bool
	// within, for a lease resumed from the live lease within (a second
	// Lease of its grant), bounds it: it counts as held only while within
	// does (its holder ends the grant through within; see liveResume).
	within *liveLease
}

// writes reports whether the lease's holder writes to the fenced
// resource: an exclusive lease's does; readers and the holders of permits
// share the key, so the resource, which keeps the highest token it saw,
// would refuse the writes of all but the latest of them.
func (l *liveLease) writes() bool { return !l.shared && l.limit == 0 }

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
	}
	return false
}

// observe looks at the lease now: held means Done open and now before the
// deadline. It reports an observation that found it held (unless its
// holder called Unlock) to s, Done's closing once, and a Done still open
// DoneSlack past the deadline as a violation. It returns whether the lease
// is held.
func (l *liveLease) observe(clk *Clock, s sink) bool {
	now := time.Now()
	dl := l.lease.Deadline()
	open := !closed(l.lease.Done())
	t, d := clk.At(now), clk.At(dl)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !open {
		if !l.doneSeen {
			l.doneSeen = true
			err := l.lease.Err()
			s.Done(l.id, t, errText(err))
			if err == nil {
				s.Violate(Violation{Kind: "err-nil", At: t, From: t, Key: l.key, Proc: l.proc, Lease: l.id,
					Text: fmt.Sprintf("key %q: lease %s: Done is closed but Err is nil", l.key, l.id)})
			}
		}
		return false
	}
	held := t < d
	if held && !l.unlocking && !l.paused && (l.within == nil || l.within.counts(now)) {
		s.Held(l.id, t, d)
	}
	if !held && t > d+Stamp(DoneSlack) && !l.late {
		l.late = true
		s.Violate(Violation{Kind: "done-late", Check: "lease", At: t, From: d, Key: l.key, Proc: l.proc, Lease: l.id, Op: "lease", Over: time.Duration(t - d),
			Text: fmt.Sprintf("key %q: lease %s (token %d) of %s: Done still open %v after its deadline %v",
				l.key, l.id, l.token, l.inst.name, time.Duration(t-d).Round(time.Millisecond), d)})
	}
	return held && !l.unlocking
}

// counts reports whether l counts as held at now: Done open, now before
// its deadline, its holder acting and not paused.
func (l *liveLease) counts(now time.Time) bool {
	l.mu.Lock()
	acting := !l.unlocking && !l.paused
	l.mu.Unlock()
	return acting && !closed(l.lease.Done()) && now.Before(l.lease.Deadline())
}

// pause stops (or, with false, starts again) the reports that l is held.
func (l *liveLease) pause(p bool) {
	l.mu.Lock()
	l.paused = p
	l.mu.Unlock()
}

// markUnlocking records that the holder stops acting as the holder.
func (l *liveLease) markUnlocking(clk *Clock, s sink, what string) {
	l.mu.Lock()
	first := !l.unlocking
	l.unlocking = true
	l.mu.Unlock()
	if first {
		s.Unlocking(l.id, clk.Now(), what)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// liveSet is a process's watched leases, and the sampler that observes
// them every few milliseconds.
type liveSet struct {
	mu sync.Mutex
	m  map[*liveLease]struct{}
}

func newLiveSet() *liveSet { return &liveSet{m: map[*liveLease]struct{}{}} }

func (s *liveSet) add(l *liveLease) {
	s.mu.Lock()
	s.m[l] = struct{}{}
	s.mu.Unlock()
}

func (s *liveSet) snapshot() []*liveLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*liveLease, 0, len(s.m))
	for l := range s.m {
		out = append(out, l)
	}
	return out
}

// sample observes every lease once, and forgets those seen ended.
func (s *liveSet) sample(clk *Clock, k sink) {
	for _, l := range s.snapshot() {
		l.observe(clk, k)
		l.mu.Lock()
		done := l.doneSeen
		l.mu.Unlock()
		if done {
			s.mu.Lock()
			delete(s.m, l)
			s.mu.Unlock()
		}
	}
}

// wait waits up to d until every lease was seen ended (their Lockers are
// closed), and reports those that were not.
func (s *liveSet) wait(d time.Duration, clk *Clock, k sink) {
	deadline := time.Now().Add(d)
	for len(s.snapshot()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range s.snapshot() {
		t := clk.Now()
		k.Violate(Violation{Kind: "not-ended", At: t, From: t, Key: l.key, Proc: l.proc, Lease: l.id,
			Text: fmt.Sprintf("key %q: lease %s still not ended %v after its Locker closed", l.key, l.id, d)})
	}
}

// run samples every period until stop closes.
func (s *liveSet) run(clk *Clock, k sink, period time.Duration, stop <-chan struct{}) {
	every(period, stop, func() { s.sample(clk, k) })
}

// lockerSlot holds a slot's current Locker, replaced when it is closed.
type lockerSlot struct {
	mu  sync.Mutex
	gen int
	cur *lockerInst
}

func (s *lockerSlot) current() *lockerInst {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// install makes lk the slot's Locker, named by name from its generation.
func (s *lockerSlot) install(lk Locker, name func(gen int) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.cur = &lockerInst{lk: lk, name: name(s.gen)}
}

// remove leaves the slot without a Locker, if in is still its Locker.
func (s *lockerSlot) remove(in *lockerInst) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == in {
		s.cur = nil
	}
}

// lockerInst is one Locker of a slot: slots replace theirs when it is
// closed (churn). It keeps the leases granted through it, to check that
// Close ended them all.
type lockerInst struct {
	lk   Locker
	name string

	mu      sync.Mutex
	closing bool // Close began
	closed  bool // Close returned
	leases  []*liveLease
}

// register adds a lease granted through the Locker; one that comes back
// after Close returned must have ended.
func (in *lockerInst) register(l *liveLease, clk *Clock, s sink) {
	in.mu.Lock()
	done := in.closed
	if !done {
		in.leases = slices.DeleteFunc(in.leases, func(l *liveLease) bool { return closed(l.lease.Done()) })
		in.leases = append(in.leases, l)
	}
	in.mu.Unlock()
	if done && !closed(l.lease.Done()) {
		t := clk.Now()
		s.Violate(Violation{Kind: "closed-open", Check: "after-close", At: t, From: t, Key: l.key, Proc: l.proc, Lease: l.id,
			Text: fmt.Sprintf("key %q: lease %s came from %s after its Close returned, with Done open", l.key, l.id, in.name)})
	}
}

// holding reports whether a lease granted through the Locker is open.
func (in *lockerInst) holding() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, l := range in.leases {
		if !closed(l.lease.Done()) {
			return true
		}
	}
	return false
}

// waitHolding waits up to d until the Locker holds a lease, so that a
// Close under load has leases to end.
func (in *lockerInst) waitHolding(d time.Duration) {
	deadline := time.Now().Add(d)
	for !in.holding() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

func (in *lockerInst) isClosing() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closing
}

// closeAndCheck closes the Locker under load, checks that Close returned
// within its bound (the target's ReleaseTimeout, plus slack) and that
// every lease granted through it ended by then, then that it grants
// nothing more (tryClosed), and returns Close's error.
func (in *lockerInst) closeAndCheck(env *procEnv) error {
	clk, s, proc, bound := env.clk, env.sink, env.proc, env.tg.ReleaseTimeout
	in.mu.Lock()
	in.closing = true
	in.mu.Unlock()
	start := clk.Now()
	err := in.lk.Close()
	end := clk.Now()
	in.mu.Lock()
	in.closed = true
	leases := append([]*liveLease(nil), in.leases...)
	in.leases = nil
	in.mu.Unlock()
	s.Ops(1)
	s.Event(Event{At: end, Kind: "close", Text: fmt.Sprintf("%s closed in %v: %v", in.name, time.Duration(end-start).Round(time.Millisecond), errText(err))})
	if end-start > Stamp(bound+CallSlack) {
		s.Violate(Violation{Kind: "late-return", Check: "close", At: end, From: start, Proc: proc, Op: "Close", Over: time.Duration(end-start) - bound,
			Text: fmt.Sprintf("Close of %s took %v, over its bound %v (ReleaseTimeout) and %v of slack", in.name, time.Duration(end-start).Round(time.Millisecond), bound, CallSlack)})
	}
	for _, l := range leases {
		if !closed(l.lease.Done()) {
			s.Violate(Violation{Kind: "closed-open", Check: "close", At: end, From: start, Key: l.key, Proc: proc, Lease: l.id,
				Text: fmt.Sprintf("key %q: lease %s (token %d) of %s: Done still open after Close returned (Err %v)", l.key, l.id, l.token, in.name, l.lease.Err())})
		}
	}
	in.tryClosed(env)
	if err != nil && errors.Is(err, lock.ErrClosed) {
		err = nil
	}
	return err
}

// tryClosed makes a TryLock through the Locker, whose Close returned, of
// a key of its own that nobody else takes (a Locker that goes on granting
// finds it free): it must be refused. A lease it returns is reported
// (register: closed-open, after-close) and unlocked. The workers' calls
// under way when Close returned show the same only when they happen to
// be at the right step and find their key free; this call, after every
// Close (churn, a side Locker's, the end of the run), always does.
func (in *lockerInst) tryClosed(env *procEnv) {
	key := "closed/" + in.name
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	asked := env.clk.Now()
	lease, err := in.lk.TryLock(ctx, key)
	env.sink.Ops(1)
	env.sink.Stat("trylock-closed", 1)
	if err != nil {
		return
	}
	w := &worker{name: "tryClosed", env: env} // granted needs no more of a worker
	if l := w.granted(in, lease, "trylock", key, exclusive, env.tg.TTL, true, asked); l != nil {
		l.markUnlocking(env.clk, env.sink, "unlock")
		lease.Unlock(ctx)
		l.observe(env.clk, env.sink)
	}
}
