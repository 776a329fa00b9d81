package nemesis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// CallSlack is how long after its context ended a call may return: the
// machine is a busy two-core VM.
const CallSlack = 200 * time.Millisecond

// writeEvery is how often a holder writes to the fenced resource.
const writeEvery = 20 * time.Millisecond

// slotAPI is what a worker needs of its slot: the current Locker, and the
// slot's faults it arms itself.
type slotAPI interface {
	// current is the Locker to use, nil while there is none.
	current() *lockerInst
	// armDrop makes the slot's proxy lose the replies of the next n
	// requests of class; nil when the slot has no proxy. stop disarms it.
	armDrop(class string, n int) (stop func())
	// armDelay delays the replies of the slot's proxy by d, unless a delay
	// is under way there; nil when it cannot. stop ends it.
	armDelay(d time.Duration) (stop func())
	// takeStall returns a stall to take before the next write (a holder
	// paused between its check and its write), or 0.
	takeStall() time.Duration
	// openSide opens a Locker over the slot's backend (its proxies)
	// outside the slot, for the worker alone (see resume_ops.go).
	openSide(name string) (*lockerInst, error)
}

// procEnv is what the workers of one process share.
type procEnv struct {
	proc    string
	clk     *Clock
	sink    sink
	tg      *Target
	keys    []string
	live    *liveSet
	handles handlePool
	seq     atomic.Int64
	stop    chan struct{}
	owed    *owed // the test process's debts (see owed.go); nil in a child
	// outlive is the process's Do that outlives its lease (see do): 0
	// until a worker takes it on, 1 while one runs it, 2 once one had
	// its lease.
	outlive atomic.Int32
	// detached: a writer's lease was detached by the process's first
	// detach (see hold), resumable soon.
	detached atomic.Bool
	// observed: 0 until a worker takes on the process's first observation
	// of the election, 1 while one makes it, 2 once one was shown a
	// leader (see firstObserve).
	observed atomic.Int32
	// longTry: 0 until a worker's TryLock takes on the process's first
	// grant by a TryLock with the longest timeout, never cancelled, 1
	// while one tries, 2 once one was granted (see acquire).
	longTry atomic.Int32
}

// detached is a lease a worker detached, for another worker (of another
// Locker) to resume from its handle, not before notBefore: some of them
// after the grant expired, when Resume must refuse.
type detached struct {
	key, handle, origin string
	owner               string // the lease's named owner, or ""
	limit               int    // a permit's semaphore size, or 0
	granted             Stamp  // its grant's, for the fenced resource
	token               uint64
	notBefore           time.Time
}

// handlePool holds the detached leases of a process.
type handlePool struct {
	mu sync.Mutex
	ds []detached
}

func (p *handlePool) put(d detached) {
	p.mu.Lock()
	p.ds = append(p.ds, d)
	p.mu.Unlock()
}

// take removes and returns a detached lease that is due, if any.
func (p *handlePool) take(now time.Time) (detached, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, d := range p.ds {
		if !now.Before(d.notBefore) {
			p.ds = append(p.ds[:i], p.ds[i+1:]...)
			return d, true
		}
	}
	return detached{}, false
}

func (e *procEnv) newID() string {
	return e.proc + "/" + strconv.FormatInt(e.seq.Add(1), 10)
}

func (e *procEnv) stopping() bool { return closed(e.stop) }

// permitLimit is the number of permits of key's semaphore, which every
// worker of every process asks for: 2 or 3, from a hash of the key, so
// that the hot keys have both.
func permitLimit(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return 2 + int(h.Sum32()%2)
}

// grantMode is the kind of lease a call asked for.
type grantMode struct {
	shared bool
	limit  int // a permit's semaphore size; 0 for other leases
}

var exclusive grantMode

// worker makes random calls on its slot's Locker: Lock, TryLock, RLock,
// TryRLock, Acquire, TryAcquire (permits of a semaphore of permitLimit)
// and Do on a few hot keys, holding what it gets for a while,
// writing to the fenced resource, refreshing with longer and shorter TTLs,
// and unlocking, abandoning, or cancelling at random moments.
type worker struct {
	name string
	env  *procEnv
	slot slotAPI
	rng  *rand.Rand
	// named is, per key, the worker's latest lease as a named owner (the
	// worker is the owner): a later one with its token re-entered its grant
	// (one the worker abandoned, say), which is no new grant.
	named map[string]*liveLease
	// side is the worker's Locker for live resumes (nil until one), sides
	// counts the side Lockers it opened, resumeLat is how long its last
	// Resume took (see resume_ops.go).
	side      *lockerInst
	sides     int
	resumeLat time.Duration
	// resumeEnd is when the worker's last Resume returned; raceResumed,
	// how long after its race began the last race's Resume returned.
	resumeEnd   time.Time
	raceResumed time.Duration
	// leftovers are the worker's reads after failed set attempts under
	// way (multi.go), which run waits for.
	leftovers sync.WaitGroup
	// notes counts the grants the worker asked for with a note (lock.WithNote).
	notes int
}

func newWorker(env *procEnv, slot slotAPI, name string, seed uint64, stream uint64) *worker {
	return &worker{name: name, env: env, slot: slot, rng: rand.New(rand.NewPCG(seed, stream)), named: map[string]*liveLease{}}
}

func (w *worker) run() {
	for !w.env.stopping() {
		w.step()
	}
	w.leftovers.Wait()
	w.closeSide()
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// chance is true with probability p.
func (w *worker) chance(p float64) bool { return w.rng.Float64() < p }

// between returns a duration uniform in [lo, hi).
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

func (w *worker) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.env.stop:
	}
}

func (w *worker) step() {
	in := w.slot.current()
	if in == nil {
		w.sleep(20 * time.Millisecond)
		return
	}
	if w.env.outlive.CompareAndSwap(0, 1) {
		got := w.do(in, pick(w.rng, w.env.keys), true)
		if got {
			w.env.outlive.Store(2)
		} else {
			w.env.outlive.Store(0) // another worker tries again
			w.sleep(between(w.rng, time.Millisecond, 15*time.Millisecond))
		}
		return
	}
	if w.firstObserve(in) {
		return
	}
	if w.chance(0.5) {
		if d, ok := w.env.handles.take(time.Now()); ok {
			if !w.resume(in, d) {
				w.sleep(between(w.rng, time.Millisecond, 15*time.Millisecond))
			}
			return
		}
	}
	if w.chance(pElection) && w.electionStep(in) {
		return
	}
	key := w.singleKey()
	rw := in.lk.Supports(lock.SharedLeases) == nil
	sem := in.lk.Supports(lock.Permits) == nil
	if sem && w.env.owes(func(o *owed) *atomic.Bool { return &o.fill }) && w.chance(pOwed) {
		// No semaphore filled yet: the owing workers all wait for a
		// permit of the first hot key, which fills it.
		if !w.acquire(in, "acquire", w.env.keys[0]) {
			w.sleep(between(w.rng, time.Millisecond, 15*time.Millisecond))
		}
		return
	}
	if w.env.tg.Reentry && w.env.owes(func(o *owed) *atomic.Bool { return &o.reentry }) && w.chance(pOwed) {
		// No re-entry yet: a named owner's Lock (a TryLock of a hot key
		// mostly finds it held), whose hold re-enters its grant (see
		// hold).
		if !w.acquire(in, "olock", key) {
			w.sleep(between(w.rng, time.Millisecond, 15*time.Millisecond))
		}
		return
	}
	owesSet := w.env.owes(func(o *owed) *atomic.Bool { return &o.set })
	if owesSet && w.chance(pOwedSet) || w.chance(pMulti) {
		if !w.multi(in, owesSet) {
			w.sleep(between(w.rng, time.Millisecond, 15*time.Millisecond))
		}
		return
	}
	n := w.rng.IntN(100)
	var got bool
	switch {
	case n < 7:
		got = w.do(in, key, false)
	case rw && n < 12:
		got = w.acquire(in, "rlock", key)
	case rw && n < 30:
		got = w.acquire(in, "tryrlock", key)
	case sem && n < 36:
		got = w.acquire(in, "acquire", key)
	case sem && n < 50:
		got = w.acquire(in, "tryacquire", key)
	case w.env.tg.Reentry && w.chance(0.25):
		op := "otrylock"
		if w.chance(0.3) {
			op = "olock"
		}
		got = w.acquire(in, op, key)
	case n < 38:
		got = w.acquire(in, "lock", key)
	default:
		got = w.acquire(in, "trylock", key)
	}
	if !got {
		w.sleep(between(w.rng, time.Millisecond, 15*time.Millisecond))
	}
}

// callCtx is a context for a call, with a timeout from timeouts and, with
// probability pCancel, a cancellation at a random moment before it. It
// returns the context's deadline and the stamp of the cancellation (Never
// until it happens).
type callCtx struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline Stamp
	timer    *time.Timer
	canceled atomic.Int64
}

func (w *worker) newCallCtx(timeouts []time.Duration, pCancel float64) *callCtx {
	timeout := pick(w.rng, timeouts)
	c := &callCtx{}
	c.canceled.Store(int64(Never))
	c.ctx, c.cancel = context.WithTimeout(context.Background(), timeout)
	dl, _ := c.ctx.Deadline()
	c.deadline = w.env.clk.At(dl)
	at, abort := laneAbortAt(w.rng) // faults_lane.go
	if abort || w.chance(pCancel) {
		if !abort {
			at = between(w.rng, 0, timeout)
		}
		c.timer = time.AfterFunc(at, func() {
			c.canceled.Store(int64(w.env.clk.Now()))
			c.cancel()
		})
	}
	if timeout >= longWait {
		// A long wait is cut short when the load stops, so that the run
		// does not wait for it.
		go func() {
			select {
			case <-w.env.stop:
				c.canceled.Store(int64(w.env.clk.Now()))
				c.cancel()
			case <-c.ctx.Done():
			}
		}()
	}
	return c
}

// end is the moment the call had to return by (slack aside).
func (c *callCtx) end() Stamp { return min(c.deadline, Stamp(c.canceled.Load())) }

func (c *callCtx) release() {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cancel()
}

// checkReturn flags a call that returned CallSlack or more after limit.
func (w *worker) checkReturn(op, key string, start, end, limit Stamp, why string) {
	if limit == Never || end <= limit+Stamp(CallSlack) {
		return
	}
	w.env.sink.Violate(Violation{Kind: "late-return", Check: "call", At: end, From: start, Key: key, Proc: w.env.proc, Op: op, Over: time.Duration(end - limit),
		Text: fmt.Sprintf("%s of key %q by %s returned at %v, %v after %s at %v (it began at %v)",
			op, key, w.name, end, time.Duration(end-limit).Round(time.Millisecond), why, limit, start)})
}

// lockOpts picks a TTL and whether to renew automatically.
func (w *worker) lockOpts() (time.Duration, bool, []lock.Option) {
	ttl := pick(w.rng, w.env.tg.LockTTLs)
	renew := w.chance(0.65)
	opts := []lock.Option{lock.WithTTL(ttl)}
	if !renew {
		opts = append(opts, lock.WithDisableAutoRenew(true))
	}
	return ttl, renew, opts
}

// longWait is the timeout of the Lock calls that wait long enough for a
// late grant to be refreshed, found gone, and waited for again (lock's
// revive), with a late hand-over message coming meanwhile: see
// handover-late.
const longWait = 6 * time.Second

var (
	lockTimeouts    = ms(20*time.Millisecond, 50*time.Millisecond, 150*time.Millisecond, 500*time.Millisecond, 1500*time.Millisecond, longWait)
	tryTimeouts     = ms(50*time.Millisecond, 500*time.Millisecond, 2*time.Second)
	refreshTimeouts = ms(20*time.Millisecond, 300*time.Millisecond, 2*time.Second, 4*time.Second)
	unlockTimeouts  = ms(time.Millisecond, 20*time.Millisecond, 500*time.Millisecond, 3*time.Second, 3*time.Second)
	doTimeouts      = ms(time.Second, 3*time.Second)
)

// acquire calls op and holds what it gets; it reports whether it got a
// lease.
func (w *worker) acquire(in *lockerInst, op, key string) bool {
	ttl, renew, opts := w.lockOpts()
	timeouts, pCancel := lockTimeouts, 0.25
	if op == "trylock" || op == "tryrlock" || op == "otrylock" || op == "tryacquire" {
		timeouts, pCancel = tryTimeouts, 0.1
	}
	// The process's first granted TryLock has the longest timeout and no
	// cancellation: a short run's might all have the short ones, and a
	// call that returns long after its grant's deadline then shows only
	// where its context leaves it the time (done-late, check grant).
	longTry := op == "trylock" && w.env.longTry.CompareAndSwap(0, 1)
	if longTry {
		timeouts, pCancel = ms(slices.Max(tryTimeouts)), 0
	}
	mode := grantMode{shared: op == "rlock" || op == "tryrlock"}
	if op == "acquire" || op == "tryacquire" {
		mode.limit = permitLimit(key)
	}
	owner := ""
	if op == "olock" || op == "otrylock" {
		owner = w.name // one logical holder: this worker
		opts = append(opts, lock.WithOwner(owner))
	}
	note := ""
	if owner == "" && in.lk.Supports(lock.Notes) == nil && w.chance(0.5) {
		w.notes++
		note = fmt.Sprintf("%s %s #%d", w.name, op, w.notes)
		opts = append(opts, lock.WithNote(note))
	}
	c := w.newCallCtx(timeouts, pCancel)
	clk := w.env.clk
	start := clk.Now()
	var lease *lock.Lease
	var err error
	switch op {
	case "lock", "olock":
		lease, err = in.lk.Lock(c.ctx, key, opts...)
	case "trylock", "otrylock":
		lease, err = in.lk.TryLock(c.ctx, key, opts...)
	case "rlock":
		lease, err = in.lk.RLock(c.ctx, key, opts...)
	case "tryrlock":
		lease, err = in.lk.TryRLock(c.ctx, key, opts...)
	case "acquire":
		lease, err = in.lk.Acquire(c.ctx, key, mode.limit, opts...)
	case "tryacquire":
		lease, err = in.lk.TryAcquire(c.ctx, key, mode.limit, opts...)
	}
	end := clk.Now()
	limit := c.end()
	c.release()
	w.env.sink.Ops(1)
	w.checkReturn(op, key, start, end, limit, "its context ended")
	switch {
	case longTry && err != nil:
		w.env.longTry.Store(0) // another TryLock tries again
	case longTry:
		w.env.longTry.Store(2)
	}
	if err != nil {
		w.failed(op, key, err)
		return false
	}
	reenters := ""
	if prev := w.named[key]; owner != "" && prev != nil && prev.token == lease.Token() {
		reenters = prev.id
		w.env.sink.Stat("reentry", 1)
	}
	if lease.Limit() != mode.limit {
		t := w.env.clk.Now()
		w.env.sink.Violate(Violation{Kind: "limit-mismatch", At: t, From: start, Key: key, Proc: w.env.proc,
			Text: fmt.Sprintf("%s of key %q by %s asked for a semaphore of %d permits, and its lease's Limit is %d", op, key, w.name, mode.limit, lease.Limit())})
	}
	l := w.grantedAs(in, lease, op, key, mode, ttl, renew, "", owner, reenters, start)
	if l != nil && owner == "" && in.lk.Supports(lock.Notes) == nil && w.chance(0.3) {
		w.checkNote(in, lease, op, key, note)
	}
	if l != nil && owner != "" {
		if reenters != "" {
			l.granted = w.named[key].granted
		}
		w.named[key] = l
	}
	if l != nil {
		w.hold(in, l, ttl, renew)
	}
	return true
}

// checkNote inspects key, whose grant lease of op was made with note
// (lock.WithNote; "" without one): while Inspect shows lease's grant
// among the holders (found by its owner token), the holder's Note must
// be note, neither dropped nor another grant's. A failed Inspect (a
// fault) or a grant not shown (lost meanwhile) judges nothing.
func (w *worker) checkNote(in *lockerInst, lease *lock.Lease, op, key, note string) {
	parts := strings.Split(lease.Handle(), ".")
	if len(parts) != 5 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := w.env.clk.Now()
	st, err := in.lk.Inspect(ctx, key)
	if err != nil {
		return
	}
	w.env.sink.Stat("note-checks", 1)
	for _, h := range st.Holders {
		if h.Owner == parts[2] && h.Note != note {
			w.env.sink.Violate(Violation{Kind: "note-mismatch", At: w.env.clk.Now(), From: start, Key: key, Proc: w.env.proc,
				Text: fmt.Sprintf("%s of key %q by %s was granted with note %q, and Inspect shows its grant (owner %s) with note %q", op, key, w.name, note, h.Owner, h.Note)})
		}
	}
}

// reenter makes a named owner's Lock or TryLock of a key its lease outer
// holds: a re-entry, with outer's token, unless outer's grant was lost
// meanwhile (then a new grant, which the checker finds overlapping outer
// if outer was still held). It returns the new hold, with its TTL and
// renewal, or nil.
func (w *worker) reenter(in *lockerInst, outer *liveLease) (*liveLease, time.Duration, bool) {
	ttl, renew, opts := w.lockOpts()
	opts = append(opts, lock.WithOwner(outer.owner))
	op, timeouts := "otrylock", tryTimeouts
	if w.chance(0.3) {
		op, timeouts = "olock", lockTimeouts
	}
	c := w.newCallCtx(timeouts, 0.1)
	clk := w.env.clk
	start := clk.Now()
	var lease *lock.Lease
	var err error
	if op == "olock" {
		lease, err = in.lk.Lock(c.ctx, outer.key, opts...)
	} else {
		lease, err = in.lk.TryLock(c.ctx, outer.key, opts...)
	}
	end := clk.Now()
	limit := c.end()
	c.release()
	w.env.sink.Ops(1)
	w.checkReturn(op, outer.key, start, end, limit, "its context ended")
	if err != nil {
		w.failed(op, outer.key, err)
		return nil, 0, false
	}
	reenters := ""
	if lease.Token() == outer.token {
		reenters = outer.id
		w.env.sink.Stat("reentry", 1)
	}
	l := w.grantedAs(in, lease, op, outer.key, exclusive, ttl, renew, "", outer.owner, reenters, start)
	if l != nil && reenters != "" {
		// Holds of one grant write as that grant, which they are.
		l.granted = outer.granted
	}
	if l != nil {
		w.named[outer.key] = l
	}
	return l, ttl, renew
}

// resume resumes a detached lease through the worker's Locker and holds
// it; it reports whether it got the lease. Resume must refuse a grant that
// expired (and then perhaps went to another lease): the checker finds the
// overlap if it does not, and the token must be the detached lease's.
func (w *worker) resume(in *lockerInst, d detached) bool {
	ttl, renew, opts := w.lockOpts()
	c := w.newCallCtx(tryTimeouts, 0.1)
	clk := w.env.clk
	start := clk.Now()
	lease, err := in.lk.Resume(c.ctx, d.handle, opts...)
	end := clk.Now()
	limit := c.end()
	c.release()
	w.env.sink.Ops(1)
	w.env.sink.Stat("resume", 1)
	w.checkReturn("resume", d.key, start, end, limit, "its context ended")
	if err != nil {
		w.failed("resume", d.key, err)
		return false
	}
	w.env.sink.Stat("resumed", 1)
	if d.limit > 0 {
		w.env.sink.Stat("resumed-permit", 1)
	}
	if lease.Key() != d.key || lease.Token() != d.token || lease.Limit() != d.limit {
		w.env.sink.Violate(Violation{Kind: "resume-mismatch", At: end, From: start, Key: d.key, Proc: w.env.proc,
			Text: fmt.Sprintf("Resume of lease %s on key %q (token %d, limit %d) by %s gave key %q token %d limit %d", d.origin, d.key, d.token, d.limit, w.name, lease.Key(), lease.Token(), lease.Limit())})
	}
	l := w.grantedAs(in, lease, "resume", d.key, grantMode{limit: d.limit}, ttl, renew, d.origin, d.owner, "", start)
	if l != nil {
		// It writes as the grant it resumed, which it is (beside other
		// holds of a named owner's grant).
		l.granted = d.granted
		w.hold(in, l, ttl, renew)
	}
	return true
}

// detach detaches l and leaves its handle in the pool, due after a random
// delay (up to one and a half times its TTL; with soon, up to a third of
// it, before the grant expires). It reports false, having
// changed nothing, when the driver cannot resume leases.
func (w *worker) detach(l *liveLease, soon bool) bool {
	clk, s := w.env.clk, w.env.sink
	ttl := l.lease.TTL()
	wasDone, deadline := closed(l.lease.Done()), l.lease.Deadline()
	start := clk.Now()
	h, err := l.lease.Detach()
	end := clk.Now()
	if errors.Is(err, lock.ErrInvalid) {
		if !closed(l.lease.Done()) {
			return false
		}
		// A lease already over, or whose deadline passed before the refusal
		// came back (its process frozen past it, say), ended by itself;
		// only a refused Detach that ended a live lease is a violation.
		if wasDone || (!time.Now().Before(deadline) && !errors.Is(l.lease.Err(), lock.ErrDetached)) {
			return false
		}
		s.Violate(Violation{Kind: "detach-refused-ended", At: end, From: start, Key: l.key, Proc: w.env.proc, Lease: l.id,
			Text: fmt.Sprintf("key %q: a refused Detach of lease %s ended it: %v", l.key, l.id, l.lease.Err())})
		return true
	}
	l.markUnlocking(clk, s, "detach")
	s.Ops(1)
	s.Event(Event{At: end, Kind: "detach", Key: l.key, Lease: l.id, Text: short(err)})
	if err == nil {
		if !closed(l.lease.Done()) || !errors.Is(l.lease.Err(), lock.ErrDetached) {
			s.Violate(Violation{Kind: "detach-open", At: end, From: start, Key: l.key, Proc: w.env.proc, Lease: l.id,
				Text: fmt.Sprintf("key %q: Detach of lease %s returned with Done closed %v, Err %v", l.key, l.id, closed(l.lease.Done()), l.lease.Err())})
		}
		wait := between(w.rng, 0, ttl/3)
		if !soon && w.chance(0.15) {
			wait = between(w.rng, ttl, ttl*3/2)
		}
		w.env.handles.put(detached{key: l.key, handle: h, origin: l.id, owner: l.owner, limit: l.limit, granted: l.granted, token: l.token, notBefore: time.Now().Add(wait)})
	}
	l.observe(clk, s)
	return true
}

// failed checks the error of a Lock that failed: inputs are valid, so
// ErrInvalid is a bug, and so is a script's ACL refusal (faults_acl.go).
func (w *worker) failed(op, key string, err error) {
	if errors.Is(err, lock.ErrInvalid) || scriptRefused(err) {
		t := w.env.clk.Now()
		w.env.sink.Violate(Violation{Kind: "unexpected-error", At: t, From: t, Key: key, Proc: w.env.proc,
			Text: fmt.Sprintf("%s of key %q by %s: %v", op, key, w.name, err)})
	}
}

// granted records a lease Lock returned: its first observation is its
// grant (or finds it dead on arrival), and it is watched from then on.
// asked is when the call began.
func (w *worker) granted(in *lockerInst, lease *lock.Lease, op, key string, mode grantMode, ttl time.Duration, renew bool, asked Stamp) *liveLease {
	return w.grantedAs(in, lease, op, key, mode, ttl, renew, "", "", "", asked)
}

// grantedAs is granted, for a lease that resumes the grant of lease
// resumes when that is not "", of the named owner owner when that is not
// "", re-entering the grant of lease reenters when that is not "".
func (w *worker) grantedAs(in *lockerInst, lease *lock.Lease, op, key string, mode grantMode, ttl time.Duration, renew bool, resumes, owner, reenters string, asked Stamp) *liveLease {
	clk := w.env.clk
	view := w.env.tg.viewOf(op, lease)
	now := time.Now()
	dl := view.Deadline()
	open := !closed(view.Done())
	t, d := clk.At(now), clk.At(dl)
	l := &liveLease{id: w.env.newID(), key: key, proc: w.env.proc, owner: owner, shared: mode.shared, limit: mode.limit, token: lease.Token(), granted: t, lease: view, inst: in}
	doa := !open || t >= d
	rec := LeaseRec{
		ID: l.id, Key: key, Shared: mode.shared, Limit: mode.limit, Holder: in.name, Proc: w.env.proc, Op: op, Token: lease.Token(), Resumes: resumes,
		Owner: owner, Reenters: reenters, Grant: grantOwner(lease), Asked: asked, Set: op == "lockmany" || op == "trylockmany",
		TTL: ttl, Renew: renew, Granted: t, DOA: doa, LastHeld: t, Deadline: d, UnlockAt: Never, DoneAt: Never,
	}
	if doa {
		rec.LastHeld = Never
	}
	w.env.sink.Grant(rec)
	if open && t > d+Stamp(DoneSlack) {
		l.late = true
		w.env.sink.Violate(Violation{Kind: "done-late", Check: "grant", At: t, From: d, Key: key, Proc: w.env.proc, Lease: l.id, Op: op, Over: time.Duration(t - d),
			Text: fmt.Sprintf("key %q: %s by %s returned lease %s (token %d) %v past its deadline %v with Done open",
				key, op, w.name, l.id, l.token, time.Duration(t-d).Round(time.Millisecond), d)})
	}
	in.register(l, clk, w.env.sink)
	w.env.live.add(l)
	if doa {
		return nil
	}
	return l
}

// hold holds a lease for a while: it writes to the fenced resource while
// it finds the lease held, refreshes it at random moments, then unlocks it
// or, if it is not renewed, may abandon it to its expiry.
func (w *worker) hold(in *lockerInst, l *liveLease, ttl time.Duration, renew bool) {
	holdFor := w.holdTime(ttl)
	var refreshAt []time.Duration
	for range w.rng.IntN(3) {
		refreshAt = append(refreshAt, between(w.rng, 0, holdFor))
	}
	abandon := !renew && w.chance(0.15)
	start := time.Now()
	keepAlive := !renew && w.chance(0.7)
	if !w.grantOps(in, l, keepAlive) {
		w.unlock(l) // its grant went with another Locker's lease
		return
	}
	if l.owner != "" && (w.chance(0.7) || w.env.owes(func(o *owed) *atomic.Bool { return &o.reentry })) {
		// A re-entry while l is held, after a while: its hold either ends
		// first (held to its end now), or outlives l (held after l ends),
		// when the count must keep the key.
		w.holdLoop(in, l, between(w.rng, 0, holdFor/2+time.Millisecond), nil, keepAlive, nil)
		if nested, nttl, nrenew := w.reenter(in, l); nested != nil {
			if w.chance(0.5) {
				w.hold(in, nested, nttl, nrenew)
			} else {
				defer w.hold(in, nested, nttl, nrenew)
			}
		}
	}
	w.holdLoop(in, l, holdFor, refreshAt, keepAlive, nil)
	if closed(l.lease.Done()) {
		if w.chance(0.5) {
			w.unlock(l) // must say the lease is gone, at once
		}
		return
	}
	if abandon {
		w.env.sink.Event(Event{At: w.env.clk.Now(), Kind: "abandon", Key: l.key, Lease: l.id,
			Text: fmt.Sprintf("left to expire after %v", time.Since(start).Round(time.Millisecond))})
		return
	}
	if !l.shared {
		// The process's first lease held to its end that writes is
		// detached, resumable soon: its resume writes (a resumed
		// lease's token is seen there) in every run, not only in those
		// where a detach and a resume happened to come.
		first := l.writes() && w.env.detached.CompareAndSwap(false, true)
		if (first || w.chance(0.12)) && w.detach(l, first) {
			return
		}
	}
	w.unlock(l)
}

// holdTime is how long to hold a lease of ttl: mostly briefly, sometimes
// past its TTL (renewed or refreshed meanwhile, or lost).
func (w *worker) holdTime(ttl time.Duration) time.Duration {
	switch n := w.rng.IntN(20); {
	case n < 14:
		return between(w.rng, 0, 40*time.Millisecond)
	case n < 19:
		return between(w.rng, 40*time.Millisecond, ttl/2)
	default:
		return between(w.rng, ttl, 2*ttl)
	}
}

// holdLoop acts as the holder for holdFor: look, write, refresh when due.
// With keepAlive (a lease not renewed automatically) it refreshes the
// lease when a third of its validity is left. It returns when the lease is
// not held any more, holdFor passed, fctx (if any) ended, or the run
// stops.
func (w *worker) holdLoop(in *lockerInst, l *liveLease, holdFor time.Duration, refreshAt []time.Duration, keepAlive bool, fctx context.Context) {
	clk, s := w.env.clk, w.env.sink
	start := time.Now()
	every := writeEvery
	if w.env.proc != parentProc {
		every = 2 * writeEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var done <-chan struct{}
	if fctx != nil {
		done = fctx.Done()
	}
	validity := time.Until(l.lease.Deadline()) // since the grant or the last refresh
	for {
		if !l.observe(clk, s) {
			return
		}
		if l.writes() {
			if d := w.slot.takeStall(); d > 0 {
				s.Event(Event{At: clk.Now(), Kind: "stall", Key: l.key, Lease: l.id, Text: fmt.Sprintf("holder stalls %v before a write", d.Round(time.Millisecond))})
				time.Sleep(d)
			}
			s.Write(l.key, l.id, l.granted, l.token)
		}
		el := time.Since(start)
		var lost time.Duration
		if len(refreshAt) > 0 && el >= refreshAt[0] {
			refreshAt = refreshAt[1:]
			validity, lost = w.refresh(in, l, validity)
		} else if keepAlive && time.Until(l.lease.Deadline()) < validity/3 {
			validity, lost = w.refresh(in, l, validity)
		}
		if lost > 0 {
			// The refresh's reply was meant to be lost: go on holding past
			// the TTL it gave, for as long as the lease is reported held.
			holdFor = max(holdFor, el+2*lost+100*time.Millisecond)
		}
		if el >= holdFor || w.env.stopping() {
			return
		}
		select {
		case <-t.C:
		case <-l.lease.Done():
		case <-done:
			return
		case <-w.env.stop:
			return
		}
	}
}

// refresh calls Refresh with a random TTL, sometimes a shorter one with
// its reply lost (armed on the slot's proxy), and checks that nil means
// held. It returns the validity the lease has from now (validity if the
// refresh failed), and the TTL of a refresh whose reply was to be lost.
func (w *worker) refresh(in *lockerInst, l *liveLease, validity time.Duration) (time.Duration, time.Duration) {
	clk, s := w.env.clk, w.env.sink
	ttl := pick(w.rng, w.env.tg.RefreshTTLs)
	var disarm func()
	var lost time.Duration
	if w.chance(0.25) {
		// A shorter TTL, if there is one: the backend applies it, the lock
		// never hears of it.
		var shorter []time.Duration
		for _, d := range w.env.tg.RefreshTTLs {
			if d < l.lease.TTL() {
				shorter = append(shorter, d)
			}
		}
		if len(shorter) > 0 {
			ttl = pick(w.rng, shorter)
		}
		// Enough lost replies that the client's own retries (go-redis
		// tries a command 4 times) are lost too: the outcome is unknown.
		if disarm = w.slot.armDrop("refresh", 6); disarm != nil {
			lost = ttl
		}
	} else if w.chance(0.1) {
		// A short TTL whose reply comes late, after the lease's deadline
		// (moved to the short TTL before it is sent) most of the time.
		ttl = slices.Min(w.env.tg.RefreshTTLs)
		disarm = w.slot.armDelay(between(w.rng, ttl/3, ttl*3/2))
	}
	timeouts := refreshTimeouts
	if disarm != nil && lost == 0 {
		timeouts = ms(4 * time.Second)
	}
	c := w.newCallCtx(timeouts, 0.1)
	start := clk.Now()
	err := l.lease.Refresh(c.ctx, ttl)
	now := time.Now()
	dl := l.lease.Deadline()
	open := !closed(l.lease.Done())
	r, d := clk.At(now), clk.At(dl)
	limit := c.end()
	c.release()
	if disarm != nil {
		disarm()
	}
	s.Ops(1)
	s.Stat("refresh", 1)
	s.Event(Event{At: r, Kind: "refresh", Key: l.key, Lease: l.id, Text: fmt.Sprintf("ttl %v: %s; deadline %v", ttl, short(err), d)})
	w.checkReturn("refresh", l.key, start, r, limit, "its context ended")
	if err != nil {
		return validity, lost
	}
	if (!open || r >= d) && !in.isClosing() {
		s.Violate(Violation{Kind: "refresh-not-held", At: r, From: start, Key: l.key, Proc: w.env.proc, Lease: l.id,
			Text: fmt.Sprintf("key %q: Refresh(%v) of lease %s returned nil at %v, but the lease is not held: Done open %v, deadline %v (Err %v)",
				l.key, ttl, l.id, r, open, d, l.lease.Err())})
		return validity, lost
	}
	l.observe(clk, s)
	return dl.Sub(now), lost
}

// unlock calls Unlock with a random timeout (some short enough to cancel
// it mid-way): the lease must be ended when it returns.
func (w *worker) unlock(l *liveLease) {
	clk, s := w.env.clk, w.env.sink
	l.markUnlocking(clk, s, "unlock")
	c := w.newCallCtx(unlockTimeouts, 0.05)
	start := clk.Now()
	err := l.lease.Unlock(c.ctx)
	end := clk.Now()
	limit := c.end()
	c.release()
	s.Ops(1)
	s.Event(Event{At: end, Kind: "unlocked", Key: l.key, Lease: l.id, Text: short(err)})
	if scriptRefused(err) {
		w.failed("unlock", l.key, err)
	}
	w.checkReturn("unlock", l.key, start, end, limit, "its context ended")
	if !errors.Is(err, lock.ErrClosed) && !closed(l.lease.Done()) {
		s.Violate(Violation{Kind: "unlock-open", At: end, From: start, Key: l.key, Proc: w.env.proc, Lease: l.id,
			Text: fmt.Sprintf("key %q: Unlock of lease %s returned (%s) with Done open", l.key, l.id, short(err))})
	}
	l.observe(clk, s)
}

// doPanic is what Do's fn panics with.
type doPanic struct{ id string }

// doLocker passes a Do's Lock through to the slot's Locker and records
// the lease it returns.
type doLocker struct {
	Locker
	w      *worker
	in     *lockerInst
	key    string
	ttl    time.Duration
	renew  bool
	leased *liveLease
}

func (d *doLocker) Lock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	asked := d.w.env.clk.Now()
	lease, err := d.Locker.Lock(ctx, key, opts...)
	if err == nil {
		d.leased = d.w.granted(d.in, lease, "do", key, exclusive, d.ttl, d.renew, asked)
	}
	return lease, err
}

// do runs lock.Do with an fn that holds and writes for a while, and
// panics one time in five (recovered here): either way the lease must be
// ended when Do returns or panics. It reports whether Do got the lease.
//
// With outlive, fn outlives its lease by a wide margin: the shortest TTL,
// not renewed (neither automatically nor by fn), held for three times
// that, the call's context long enough and never cancelled: fn must see
// its context end with the lease (checkCtxEnds), then it panics. Each
// process makes one such Do early in the run (procEnv.outlive):
// otherwise only the rare random Do whose lease ends under fn (a long
// hold of a short lease, a late refresh, a fault) shows the first, and
// a short run can end without a Do that panics.
func (w *worker) do(in *lockerInst, key string, outlive bool) bool {
	clk, s := w.env.clk, w.env.sink
	ttl, renew, opts := w.lockOpts()
	keepAlive := !renew
	if outlive {
		ttl, renew, keepAlive = slices.Min(w.env.tg.LockTTLs), false, false
		opts = []lock.Option{lock.WithTTL(ttl), lock.WithDisableAutoRenew(true)}
	}
	dl := &doLocker{Locker: in.lk, w: w, in: in, key: key, ttl: ttl, renew: renew}
	panics := w.chance(0.2) || outlive
	holdFor := w.holdTime(ttl)
	timeouts, pCancel := doTimeouts, 0.1
	if outlive {
		holdFor = 3 * ttl
		timeouts, pCancel = ms(slices.Max(doTimeouts)+2*holdFor), 0
		s.Stat("do-outlive", 1)
	}
	c := w.newCallCtx(timeouts, pCancel)
	fnEnd := Never
	panicked := false
	start := clk.Now()
	var err error
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		err = w.env.tg.runDo(c.ctx, dl, key, func(fctx context.Context) error {
			defer func() { fnEnd = clk.Now() }()
			l := dl.leased
			if l == nil {
				return errors.New("lock.Do ran fn without the lease Lock returned") // DOA: ended already
			}
			w.holdLoop(in, l, holdFor, nil, keepAlive, fctx)
			if fctx.Err() == nil && !closed(l.lease.Done()) && !time.Now().Before(l.lease.Deadline()) {
				// holdLoop saw the deadline pass before Done closed: that
				// comes within DoneSlack (done-late reports it otherwise).
				waitClosed(l.lease.Done(), time.Until(l.lease.Deadline())+DoneSlack)
			}
			l.markUnlocking(clk, s, "do: fn returns")
			if closed(l.lease.Done()) {
				w.checkCtxEnds(l, fctx)
			}
			if panics {
				panicked = true
				panic(doPanic{l.id})
			}
			return nil
		}, opts...)
	}()
	end := clk.Now()
	limit := c.end()
	c.release()
	s.Ops(1)
	if recovered != nil {
		if p, ok := recovered.(doPanic); !ok || dl.leased == nil || p.id != dl.leased.id {
			panic(recovered) // not ours
		}
	} else if panicked {
		s.Violate(Violation{Kind: "do-panic", At: end, From: start, Key: key, Proc: w.env.proc,
			Text: fmt.Sprintf("lock.Do of key %q by %s: fn panicked, but Do returned (%s) instead of panicking", key, w.name, short(err))})
	}
	if fnEnd == Never {
		w.checkReturn("lock.Do", key, start, end, limit, "its context ended")
	} else {
		w.checkReturn("lock.Do", key, start, end, fnEnd+Stamp(lock.DefaultReleaseTimeout), "its fn returned and DefaultReleaseTimeout passed")
	}
	if l := dl.leased; l != nil && !closed(l.lease.Done()) && !in.isClosing() {
		s.Violate(Violation{Kind: "do-open", At: end, From: start, Key: key, Proc: w.env.proc, Lease: l.id,
			Text: fmt.Sprintf("key %q: lock.Do by %s returned (panicked: %v; %s) with its lease %s's Done open", key, w.name, recovered != nil, short(err), l.id)})
	}
	if l := dl.leased; l != nil {
		l.observe(clk, s)
	}
	return dl.leased != nil
}

// waitClosed waits up to d for c to close.
func waitClosed(c <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
	case <-t.C:
	}
}

// checkCtxEnds: once the lease ended, Do's fn context must end soon.
func (w *worker) checkCtxEnds(l *liveLease, fctx context.Context) {
	t := time.NewTimer(CallSlack)
	defer t.Stop()
	select {
	case <-fctx.Done():
	case <-t.C:
		now := w.env.clk.Now()
		w.env.sink.Violate(Violation{Kind: "do-ctx", At: now, From: now - Stamp(CallSlack), Key: l.key, Proc: w.env.proc, Lease: l.id,
			Text: fmt.Sprintf("key %q: lease %s of lock.Do ended (%v), but fn's context was not cancelled within %v", l.key, l.id, l.lease.Err(), CallSlack)})
	}
}

// short is an error's first line, shortened.
func short(err error) string {
	if err == nil {
		return "ok"
	}
	s := err.Error()
	for i := range len(s) {
		if s[i] == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
