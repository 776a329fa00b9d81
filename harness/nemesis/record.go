package nemesis

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// LeaseRec is one lease as the checker knows it. Its holder observes it
// (Observe): held means Done open and the observation's moment before
// Deadline. A lease is proven held from its grant (the first observation,
// right after Lock returned) to its last observation that found it held
// before its holder called Unlock: Done cannot reopen, and a correct lock
// never moves a passed deadline, so it was held all along in between.
type LeaseRec struct {
	ID     string // "<proc>/<n>"
	Key    string
	Shared bool
	// Limit is, for a permit of a semaphore (Locker.Acquire), the number
	// of permits the worker asked for (every worker agrees on a key's);
	// zero for an exclusive or shared lease.
	Limit  int
	Holder string // the Locker that granted it
	Proc   string // the process: "parent" or a child's name
	Op     string // lock, trylock, rlock, tryrlock, acquire, tryacquire, do, resume
	Token  uint64
	// Resumes is the ID of the lease whose grant this one resumed (Op
	// "resume"); "" for a grant.
	Resumes string
	// Asked is when the call that returned the lease began (0: unknown):
	// the grant was made between it and Granted.
	Asked Stamp
	// Set: a member of a set (LockMany, TryLockMany), granted at any
	// moment of its call, perhaps long before Granted (see setLossLocked).
	Set bool
	// Grant is the owner token of the lease's grant (from its Handle):
	// with the key and the token, it names the grant, which a lease
	// resumed from a live one's handle shares with it (one holder).
	Grant string
	// Owner is the owner id of a named lease (lock.WithOwner), "" for an
	// anonymous one; Reenters the ID of the hold of the same owner whose
	// grant this one re-entered (same token), "" for a grant.
	Owner, Reenters string
	TTL             time.Duration
	Renew           bool
	// Granted is the first observation, right after Lock returned; for a
	// lease Lock returned already ended or past its deadline (dead on
	// arrival, DOA), the moment it was seen so.
	Granted Stamp
	DOA     bool
	// LastHeld is the last observation that found it held, before its
	// holder called Unlock (UnlockAt): Unlock closes Done only when the
	// backend answered, and the holder no longer acts meanwhile.
	LastHeld Stamp
	Deadline Stamp // the deadline at the last observation
	UnlockAt Stamp
	DoneAt   Stamp  // when its holder saw Done closed
	Err      string // Lease.Err() then
}

func (l *LeaseRec) String() string {
	return fmt.Sprintf("lease %s (%s %s by %s, token %d, ttl %v, renew %v, granted %v, held until %v, deadline %v, unlock %v, done %v %s)",
		l.ID, l.mode(), l.Op, l.Holder, l.Token, l.TTL, l.Renew, l.Granted, l.LastHeld, l.Deadline, l.UnlockAt, l.DoneAt, l.Err)
}

func (l *LeaseRec) mode() string {
	switch {
	case l.Limit > 0:
		return fmt.Sprintf("permit of %d", l.Limit)
	case l.Shared:
		return "shared"
	}
	return "exclusive"
}

// class is the lease's kind for exclusion: exclusive, shared or permit.
func (l *LeaseRec) class() int {
	switch {
	case l.Limit > 0:
		return classPermit
	case l.Shared:
		return classShared
	}
	return classExclusive
}

const (
	classExclusive = iota
	classShared
	classPermit
	nClasses
)

// compatible reports whether leases of classes a and b of one key may be
// held at once: two shared leases, or two permits (as many as the limit:
// see permitsLocked).
func compatible(a, b int) bool { return a == b && a != classExclusive }

// Event is one line of a run's history.
type Event struct {
	At    Stamp
	Kind  string // grant, doa, unlock, done, refresh, fault, violation, ...
	Key   string // "" for events of no key (faults)
	Lease string
	Text  string
	// From, for a multi-held event, is when the holder was first seen
	// (see leftoversLocked); for a set-failed one, when the attempt began.
	From Stamp
}

// Violation is a breach of the lock contract found by the checker.
type Violation struct {
	Kind  string // overlap, done-late, token-order, stale-write, ...
	At    Stamp
	From  Stamp // start of the behaviour judged (a call's start, a deadline)
	Key   string
	Proc  string
	Lease string
	Text  string
	// Op and Over, for late-return and done-late: the call, and by how
	// much it (or Done) was late.
	Op   string
	Over time.Duration
	// Check names the detector that judged it, for a kind that more than
	// one detector reports (kindChecks); "" for the others.
	Check string
}

// Detector is the detector that reported v: its kind, and its check where
// the kind has several (see kindChecks).
func (v Violation) Detector() string {
	if v.Check == "" {
		return v.Kind
	}
	return v.Kind + "/" + v.Check
}

// Fault is one injected fault.
type Fault struct {
	Kind, Target string
	Start, End   Stamp // End: Never while it lasts
	// Server: the fault hits the server (every client); liveness is
	// judged only away from these.
	Server bool
	// StateLoss: the backend forgets its grants (a restart without
	// persistence): exclusion across it is not guaranteed, fencing is.
	StateLoss bool
	// Frozen names the process a SIGSTOP froze.
	Frozen string
}

// WakeBound is how soon after a frozen process resumes its leases must be
// seen ended: timing judgements of its own (a late Done, a late return)
// within it are excused, since the process could not act while frozen.
const WakeBound = time.Second

// Recorder keeps a run's history and checks it as it grows: overlaps of
// leases proven held, tokens out of grant order, and the fenced resource's
// writes. Sinks report to it; Check runs the incremental checks; Final
// the last ones.
type Recorder struct {
	clk  *Clock
	logf func(format string, args ...any)
	// maxPrinted bounds the violations of each kind printed in full, with
	// their history.
	maxPrinted int
	replay     string

	mu         sync.Mutex
	leases     map[string]*LeaseRec
	byKey      map[string][]*LeaseRec // proven-held leases by grant
	span       map[string]Stamp       // per key: longest proven interval
	dirty      map[*LeaseRec]bool
	pairs      map[[2]string]bool
	tok        map[string]*tokenState
	events     []Event
	faults     []*Fault
	violations []Violation
	pending    []pendingViolation // timing violations, judged a little later
	starved    map[string][][2]Stamp
	excused    map[string]int
	printed    map[string]int // by kind and call
	stats      Stats

	// the fenced resource, per key
	high   map[string]uint64
	has    map[string]bool
	newest map[string]Stamp  // latest grant with an accepted write
	newID  map[string]string // its lease

	// permit grants already judged: full semaphore seen, over its limit
	// reported (or excused)
	full, crowded map[string]bool
	// judged: the multi-held events judged (record_multi.go);
	// recovery: the target's Recovery, by which they are judged
	judged   map[Event]bool
	recovery time.Duration
	// terms judged (termsLocked)
	termsJudged map[string]bool
}

// Stats are a run's counts.
type Stats struct {
	Ops, Faults, Grants, DOA, Shared        int
	Writes, Accepted, StaleRejected, Probes int
	Refreshes, LostReplies                  int
	// Reentries counts re-entries of a named owner's grant (holds with its
	// token).
	Reentries int
	// Resumes counts Resume calls of detached leases, Resumed those that
	// got the lease (the others found the grant expired, or failed).
	Resumes, Resumed int
	// ResumedPermits counts the Resumed leases that were permits.
	ResumedPermits int
	// Permits counts the grants of semaphore permits; PermitsFull those
	// that were proven held while as many permits of the key as its limit
	// were (itself among them): the semaphore was full, and the count
	// check had something to judge.
	Permits, PermitsFull int
	// FaultKinds counts the faults by kind.
	FaultKinds map[string]int
	// Counts are the other statistics reported (Stat), by name.
	Counts map[string]int
}

// askedAt is the first moment the lease's grant may have been made: its
// call's start (a reply may come late), or its grant when that is
// unknown.
func (l *LeaseRec) askedAt() Stamp {
	if l.Asked > 0 && l.Asked < l.Granted {
		return l.Asked
	}
	return l.Granted
}

// sameGrant reports whether a and b are Leases of one grant: same key,
// grant owner and token (a lease and one resumed from its handle).
func sameGrant(a, b *LeaseRec) bool {
	return a.Grant != "" && a.Key == b.Key && a.Grant == b.Grant && a.Token == b.Token
}

// pendingViolation is a timing violation waiting for the reports that may
// excuse it (a child's freeze, a process's starvation) to arrive.
type pendingViolation struct {
	v       Violation
	arrived time.Time
}

type tokenState struct {
	checked int // leases of byKey checked, in order; -1: check again
	// per class (exclusive, shared, permit): the highest token granted so
	// far, and its lease
	max      [nClasses]uint64
	maxID    [nClasses]string
	have     [nClasses]bool
	reported map[string]bool
}

// NewRecorder returns an empty Recorder on clk. logf prints violations as
// they are found; replay is the command that replays the run.
func NewRecorder(clk *Clock, logf func(format string, args ...any), replay string) *Recorder {
	return &Recorder{
		clk: clk, logf: logf, replay: replay, maxPrinted: 3, printed: map[string]int{},
		leases: map[string]*LeaseRec{}, byKey: map[string][]*LeaseRec{}, span: map[string]Stamp{},
		dirty: map[*LeaseRec]bool{}, pairs: map[[2]string]bool{}, tok: map[string]*tokenState{},
		excused: map[string]int{}, high: map[string]uint64{}, has: map[string]bool{}, newest: map[string]Stamp{}, newID: map[string]string{},
		starved: map[string][][2]Stamp{}, full: map[string]bool{}, crowded: map[string]bool{}, judged: map[Event]bool{},
		termsJudged: map[string]bool{},
	}
}

// Now is the current Stamp.
func (r *Recorder) Now() Stamp { return r.clk.Now() }

func (r *Recorder) eventLocked(e Event) { r.events = append(r.events, e) }

// Event records a line of history.
func (r *Recorder) Event(e Event) {
	r.mu.Lock()
	r.eventLocked(e)
	r.mu.Unlock()
}

// Ops counts calls made.
func (r *Recorder) Ops(n int) {
	r.mu.Lock()
	r.stats.Ops += n
	r.mu.Unlock()
}

// Count adds to a statistic.
func (r *Recorder) Count(f func(s *Stats)) {
	r.mu.Lock()
	f(&r.stats)
	r.mu.Unlock()
}

// Grant records a new lease, as first observed.
func (r *Recorder) Grant(l LeaseRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.leases[l.ID]; dup {
		return
	}
	lr := &l
	r.leases[l.ID] = lr
	r.stats.Grants++
	switch l.class() {
	case classShared:
		r.stats.Shared++
	case classPermit:
		r.stats.Permits++
	}
	kind := "grant"
	if l.DOA {
		r.stats.DOA++
		kind = "doa"
	}
	r.eventLocked(Event{At: l.Granted, Kind: kind, Key: l.Key, Lease: l.ID,
		Text: fmt.Sprintf("%s %s by %s token %d ttl %v renew %v deadline %v", l.Op, l.mode(), l.Holder, l.Token, l.TTL, l.Renew, l.Deadline)})
	if l.DOA {
		return
	}
	ls := r.byKey[l.Key]
	i := sort.Search(len(ls), func(i int) bool { return ls[i].Granted > l.Granted })
	ls = slices.Insert(ls, i, lr)
	r.byKey[l.Key] = ls
	if ts := r.tok[l.Key]; ts != nil && i < ts.checked {
		ts.checked = -1 // a late report: check the key's order again
	}
	r.dirty[lr] = true
	r.growSpan(lr)
}

func (r *Recorder) growSpan(l *LeaseRec) {
	if l.LastHeld != Never && l.LastHeld-l.Granted > r.span[l.Key] {
		r.span[l.Key] = l.LastHeld - l.Granted
	}
}

// Held records an observation that found the lease held at at, with its
// deadline then.
func (r *Recorder) Held(id string, at, deadline Stamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.leases[id]
	if l == nil || l.DOA {
		return
	}
	l.Deadline = deadline
	if at > l.LastHeld {
		l.LastHeld = at
		r.dirty[l] = true
		r.growSpan(l)
	}
}

// Unlocking records that the holder calls Unlock (or Do's fn returned).
func (r *Recorder) Unlocking(id string, at Stamp, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.leases[id]
	if l == nil {
		return
	}
	if l.UnlockAt == Never {
		l.UnlockAt = at
	}
	r.eventLocked(Event{At: at, Kind: "unlock", Key: l.Key, Lease: id, Text: what})
}

// Done records that the holder saw Done closed, and Err.
func (r *Recorder) Done(id string, at Stamp, errText string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.leases[id]
	if l == nil {
		return
	}
	if l.DoneAt == Never {
		l.DoneAt, l.Err = at, errText
		r.eventLocked(Event{At: at, Kind: "done", Key: l.Key, Lease: id, Text: errText})
	}
}

// FaultStart records the start of a fault, and returns the function that
// records its end.
func (r *Recorder) FaultStart(f Fault) (end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f.Start, f.End = r.clk.Now(), Never
	fp := &f
	r.faults = append(r.faults, fp)
	r.stats.Faults++
	if r.stats.FaultKinds == nil {
		r.stats.FaultKinds = map[string]int{}
	}
	r.stats.FaultKinds[f.Kind]++
	r.eventLocked(Event{At: f.Start, Kind: "fault", Text: fmt.Sprintf("%s %s begins%s", f.Kind, f.Target, faultFlags(f))})
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			fp.End = r.clk.Now()
			r.eventLocked(Event{At: fp.End, Kind: "fault", Text: fmt.Sprintf("%s %s ends", fp.Kind, fp.Target)})
		})
	}
}

func faultFlags(f Fault) string {
	var s []string
	if f.Server {
		s = append(s, "server")
	}
	if f.StateLoss {
		s = append(s, "state lost")
	}
	if f.Frozen != "" {
		s = append(s, "frozen "+f.Frozen)
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

// Fault records an instantaneous fault (a lost reply).
func (r *Recorder) Fault(f Fault) { r.FaultStart(f)() }

// Quiet reports whether no server fault was under way at any moment of
// [from-recovery, to].
func (r *Recorder) Quiet(from, to Stamp, recovery time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	lo := from - Stamp(recovery)
	for _, f := range r.faults {
		if f.Server && f.Start <= to && f.End >= lo {
			return false
		}
	}
	return true
}

// frozenLocked reports whether proc was frozen, or woke less than
// WakeBound before, at some moment of [from, to].
func (r *Recorder) frozenLocked(proc string, from, to Stamp) bool {
	for _, f := range r.faults {
		if f.Frozen == proc && f.Start <= to && (f.End == Never || f.End+Stamp(WakeBound) >= from) {
			return true
		}
	}
	return false
}

// stateLostLocked reports whether the backend lost its state after a and
// no later than b.
func (r *Recorder) stateLostLocked(a, b Stamp) bool {
	for _, f := range r.faults {
		if f.StateLoss && a < f.Start && f.Start <= b {
			return true
		}
	}
	return false
}

// timing kinds are judged against the process's own clock and scheduling:
// excused when the process was frozen, or starved of CPU for most of the
// time by which it was late.
var timingKinds = map[string]bool{"done-late": true, "late-return": true, "refresh-not-held": true, "do-ctx": true, "term": true}

// slackOf is the slack a timing violation of kind was already given.
func slackOf(kind string) time.Duration {
	if kind == "done-late" || kind == "term" {
		return DoneSlack
	}
	return CallSlack
}

// Starved records that proc could not run (a goroutine due at from woke
// at to): the machine is busy.
func (r *Recorder) Starved(proc string, from, to Stamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starved[proc] = append(r.starved[proc], [2]Stamp{from, to})
	r.eventLocked(Event{At: to, Kind: "starved", Text: fmt.Sprintf("%s could not run for %v", proc, time.Duration(to-from).Round(time.Millisecond))})
}

// starvedLocked is how long proc was starved within [from, to].
func (r *Recorder) starvedLocked(proc string, from, to Stamp) time.Duration {
	var d Stamp
	for _, s := range r.starved[proc] {
		if lo, hi := max(s[0], from), min(s[1], to); hi > lo {
			d += hi - lo
		}
	}
	return time.Duration(d)
}

// Violate records a violation. Timing judgements wait a little for the
// reports that may excuse them: a child process that was frozen
// meanwhile, a process starved of CPU for most of the time by which it was
// late.
func (r *Recorder) Violate(v Violation) {
	r.mu.Lock()
	if timingKinds[v.Kind] {
		r.pending = append(r.pending, pendingViolation{v, time.Now()})
		r.mu.Unlock()
		return
	}
	msg := r.violateLocked(v)
	r.mu.Unlock()
	if msg != "" {
		r.logf("%s", msg)
	}
}

// judgeLocked decides the pending timing violations that arrived before
// cutoff, and returns what to print.
func (r *Recorder) judgeLocked(cutoff time.Time) []string {
	var msgs []string
	keep := r.pending[:0]
	for _, p := range r.pending {
		if p.arrived.After(cutoff) {
			keep = append(keep, p)
			continue
		}
		v := p.v
		switch {
		case v.Proc != parentProc && r.frozenLocked(v.Proc, v.From, v.At):
			r.excused["frozen "+v.Kind]++
			r.eventLocked(Event{At: v.At, Kind: "excused", Key: v.Key, Lease: v.Lease, Text: v.Kind + " of a frozen process: " + v.Text})
		case v.Over > 0 && v.Over-r.starvedLocked(v.Proc, v.From, v.At) <= slackOf(v.Kind):
			r.excused["starved "+v.Kind]++
			r.eventLocked(Event{At: v.At, Kind: "excused", Key: v.Key, Lease: v.Lease, Text: v.Kind + " of a process starved of CPU: " + v.Text})
		default:
			msgs = append(msgs, r.violateLocked(v))
		}
	}
	r.pending = keep
	return msgs
}

// violateLocked records v and returns what to print.
func (r *Recorder) violateLocked(v Violation) string {
	r.violations = append(r.violations, v)
	r.eventLocked(Event{At: v.At, Kind: "VIOLATION", Key: v.Key, Lease: v.Lease, Text: v.Kind + ": " + v.Text})
	head := fmt.Sprintf("VIOLATION %s at %v: %s", v.Kind, v.At, v.Text)
	kind := strings.TrimSpace(v.Kind + " " + v.Op)
	n := r.printed[kind]
	r.printed[kind]++
	switch {
	case n < r.maxPrinted:
		return head + "\n" + r.excerptLocked(v.Key, v.At) + "  replay: " + r.replay
	case n == r.maxPrinted:
		return head + "\n  (further " + kind + " violations are counted, not printed)"
	}
	return ""
}

// excerptLocked is the history around at: events of key (and of no key)
// from 3s before to a little after.
func (r *Recorder) excerptLocked(key string, at Stamp) string {
	lo, hi := at-Stamp(3*time.Second), at+Stamp(500*time.Millisecond)
	var sel []Event
	for _, e := range r.events {
		if e.At >= lo && e.At <= hi && (e.Key == "" || e.Key == key) {
			sel = append(sel, e)
		}
	}
	var before []string // faults begun before the window, still on in it
	for _, f := range r.faults {
		if f.Start < lo && f.End >= lo {
			before = append(before, fmt.Sprintf("%s %s (%v to %v)%s", f.Kind, f.Target, f.Start, f.End, faultFlags(*f)))
		}
	}
	slices.SortStableFunc(sel, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	// the last 30 events of the key, and every fault of the window
	cut, n := 0, 0
	for i := len(sel) - 1; i >= 0; i-- {
		if sel[i].Key != "" {
			if n++; n == 30 {
				cut = i
				break
			}
		}
	}
	var keep []Event
	for i, e := range sel {
		if e.Key == "" || i >= cut {
			keep = append(keep, e)
		}
	}
	sel = keep
	var b strings.Builder
	fmt.Fprintf(&b, "  history of key %q (and faults) around %v:\n", key, at)
	for _, f := range before {
		fmt.Fprintf(&b, "    under way: %s\n", f)
	}
	for _, e := range sel {
		fmt.Fprintf(&b, "    %v %-9s %s %s\n", e.At, e.Kind, e.Lease, e.Text)
	}
	return b.String()
}

// Write is a write of the fenced resource by lease id (granted at granted,
// carrying token) on key: accepted if token is at least the highest
// accepted for key. A write of a lease granted before the latest grant
// that wrote is stale: accepted, it is a violation; refused, fencing at
// work.
func (r *Recorder) Write(key, id string, granted Stamp, token uint64) bool {
	r.mu.Lock()
	ok := !r.has[key] || token >= r.high[key]
	stale := r.has[key] && granted < r.newest[key]
	r.stats.Writes++
	if ok {
		r.stats.Accepted++
		r.has[key] = true
		r.high[key] = max(r.high[key], token)
		if granted >= r.newest[key] {
			r.newest[key], r.newID[key] = granted, id
		}
	}
	var msg string
	now := r.clk.Now()
	newer := r.leases[r.newID[key]]
	switch {
	case ok && stale && newer != nil && r.setLossLocked(newer):
		// The newer grant is a set's member whose call straddled a state
		// loss: it may have been granted before the loss, and before id.
		r.excused["write across a state loss"]++
	case ok && stale:
		msg = r.violateLocked(Violation{Kind: "stale-write", At: now, From: granted, Key: key, Lease: id,
			Text: fmt.Sprintf("key %q: write of lease %s (token %d, granted %v) accepted after a write of a lease granted at %v",
				key, id, token, granted, r.newest[key])})
	case !ok && stale:
		r.stats.StaleRejected++
	case !ok && r.leases[id] != nil && r.setLossLocked(r.leases[id]):
		r.excused["refused write across a state loss"]++
	case !ok:
		msg = r.violateLocked(Violation{Kind: "token-order", Check: "write", At: now, From: granted, Key: key, Lease: id,
			Text: fmt.Sprintf("key %q: write of lease %s (token %d, granted %v), the latest grant to write, refused: a token of an earlier grant is higher (%d)",
				key, id, token, granted, r.high[key])})
	}
	r.mu.Unlock()
	if msg != "" {
		r.logf("%s", msg)
	}
	return ok
}

// Check runs the incremental checks: overlaps of the leases observed since
// the last Check, and token order of the leases granted before horizon.
func (r *Recorder) Check(horizon Stamp) {
	r.check(horizon, time.Now().Add(-500*time.Millisecond))
}

func (r *Recorder) check(horizon Stamp, cutoff time.Time) {
	r.mu.Lock()
	msgs := r.termsLocked(horizon == Never)
	msgs = append(msgs, r.judgeLocked(cutoff)...)
	for l := range r.dirty {
		msgs = append(msgs, r.overlapsLocked(l)...)
		msgs = append(msgs, r.permitsLocked(l)...)
	}
	clear(r.dirty)
	for key := range r.byKey {
		msgs = append(msgs, r.tokensLocked(key, horizon)...)
	}
	r.mu.Unlock()
	for _, m := range msgs {
		if m != "" {
			r.logf("%s", m)
		}
	}
}

// overlapsLocked compares l with the leases of its key whose proven
// intervals may meet its own: any two overlap unless both are shared, or
// both are permits (permitsLocked counts those).
func (r *Recorder) overlapsLocked(a *LeaseRec) []string {
	if a.LastHeld == Never {
		return nil
	}
	ls := r.byKey[a.Key]
	lo := a.Granted - r.span[a.Key]
	i := sort.Search(len(ls), func(i int) bool { return ls[i].Granted > a.LastHeld })
	var msgs []string
	for i--; i >= 0 && ls[i].Granted >= lo; i-- {
		b := ls[i]
		if b == a || compatible(a.class(), b.class()) || b.LastHeld == Never || b.LastHeld < a.Granted {
			continue
		}
		if a.Owner != "" && a.Owner == b.Owner && a.Token == b.Token {
			continue // two holds of one named owner's grant
		}
		if sameGrant(a, b) {
			continue // two Leases of one grant, one resumed from the other
		}
		first, second := b, a
		if a.Granted < b.Granted || (a.Granted == b.Granted && a.ID < b.ID) {
			first, second = a, b
		}
		pk := [2]string{first.ID, second.ID}
		if r.pairs[pk] {
			continue
		}
		r.pairs[pk] = true
		if r.stateLostLocked(first.askedAt(), second.Granted) || r.setLossLocked(second) {
			r.excused["overlap across a state loss"]++
			r.eventLocked(Event{At: second.Granted, Kind: "excused", Key: a.Key, Lease: second.ID,
				Text: fmt.Sprintf("overlap with %s across a restart without persistence", first.ID)})
			continue
		}
		at := second.Granted
		msgs = append(msgs, r.violateLocked(Violation{Kind: "overlap", At: at, From: at, Key: a.Key, Lease: second.ID,
			Text: fmt.Sprintf("key %q: two leases held at once at %v:\n  %v\n  %v", a.Key, at, first, second)}))
	}
	return msgs
}

// tokensLocked checks, in grant order, that every lease granted before
// horizon has a token above those of the leases granted before it that
// it excludes: for an exclusive lease, all of them; for a shared lease,
// the exclusive ones and the permits; for a permit, the exclusive and
// shared ones. Leases that may be held together (shared ones, permits of
// one semaphore) may be granted together in any order.
func (r *Recorder) tokensLocked(key string, horizon Stamp) []string {
	ts := r.tok[key]
	if ts == nil {
		ts = &tokenState{reported: map[string]bool{}}
		r.tok[key] = ts
	}
	if ts.checked < 0 {
		*ts = tokenState{reported: ts.reported}
	}
	var msgs []string
	ls := r.byKey[key]
	for ; ts.checked < len(ls) && ls[ts.checked].Granted <= horizon; ts.checked++ {
		l := ls[ts.checked]
		if l.Resumes != "" || l.Reenters != "" {
			// Not a grant: the token is its origin's (resume checks that),
			// or that of the hold it re-entered.
			continue
		}
		c := l.class()
		var bound uint64
		var boundID string
		var have bool
		for k := range nClasses {
			if ts.have[k] && !compatible(c, k) && (!have || ts.max[k] > bound) {
				bound, boundID, have = ts.max[k], ts.maxID[k], true
			}
		}
		if have && l.Token <= bound && !ts.reported[l.ID] && r.setLossLocked(l) {
			ts.reported[l.ID] = true
			r.excused["token order across a state loss"]++
		}
		if have && l.Token <= bound && !ts.reported[l.ID] {
			ts.reported[l.ID] = true
			other := r.leases[boundID]
			msgs = append(msgs, r.violateLocked(Violation{Kind: "token-order", Check: "grants", At: l.Granted, From: l.Granted, Key: key, Lease: l.ID,
				Text: fmt.Sprintf("key %q: token %d of lease %s (granted %v) is not above token %d of lease %s granted before it\n  %v\n  %v",
					key, l.Token, l.ID, l.Granted, bound, boundID, other, l)}))
		}
		if !ts.have[c] || l.Token > ts.max[c] {
			ts.max[c], ts.maxID[c], ts.have[c] = l.Token, l.ID, true
		}
	}
	return msgs
}

// permitsLocked checks that, at no moment of a permit a's proven interval,
// more permits of its key were proven held than the semaphore's limit. The
// most permits are held at once at the grant of one of them: it judges,
// once each, the grants of the permits met by a's interval that fall
// within it, and reports a grant that made them more than the limit
// (over-limit). Permits granted before a state loss that came before the
// grant judged are not counted (the backend forgot them), as overlaps
// across a state loss are excused.
func (r *Recorder) permitsLocked(a *LeaseRec) []string {
	if a.Limit == 0 || a.LastHeld == Never {
		return nil
	}
	ls := r.byKey[a.Key]
	lo := a.Granted - r.span[a.Key]
	i := sort.Search(len(ls), func(i int) bool { return ls[i].Granted > a.LastHeld })
	var near []*LeaseRec // the permits whose intervals meet a's, a among them
	for i--; i >= 0 && ls[i].Granted >= lo; i-- {
		if b := ls[i]; b.Limit > 0 && b.LastHeld != Never && b.LastHeld >= a.Granted {
			near = append(near, b)
		}
	}
	var msgs []string
	for _, x := range near {
		if x.Granted < a.Granted || r.crowded[x.ID] {
			continue
		}
		at := x.Granted
		var crowd []*LeaseRec
		live, limit := 0, x.Limit
		for _, c := range near {
			if c.Granted <= at && at <= c.LastHeld && !slices.ContainsFunc(crowd, func(o *LeaseRec) bool { return sameGrant(c, o) }) {
				crowd = append(crowd, c)
				limit = min(limit, c.Limit)
				if !r.stateLostLocked(c.Granted, at) {
					live++
				}
			}
		}
		if live >= limit && !r.full[x.ID] {
			r.full[x.ID] = true
			r.stats.PermitsFull++
		}
		if len(crowd) <= limit {
			continue
		}
		r.crowded[x.ID] = true
		if live <= limit {
			r.excused["over-limit across a state loss"]++
			r.eventLocked(Event{At: at, Kind: "excused", Key: a.Key, Lease: x.ID,
				Text: fmt.Sprintf("%d permits held at once (limit %d), across a restart without persistence", len(crowd), limit)})
			continue
		}
		slices.SortFunc(crowd, func(p, q *LeaseRec) int { return cmp.Compare(p.Granted, q.Granted) })
		var b strings.Builder
		for _, c := range crowd {
			fmt.Fprintf(&b, "\n  %v", c)
			if r.stateLostLocked(c.Granted, at) {
				b.WriteString(" (granted before a state loss: not counted)")
			}
		}
		msgs = append(msgs, r.violateLocked(Violation{Kind: "over-limit", At: at, From: at, Key: a.Key, Lease: x.ID,
			Text: fmt.Sprintf("key %q: %d permits of a semaphore of %d held at once at %v, when %s was granted:%s",
				a.Key, live, limit, at, x.ID, b.String())}))
	}
	return msgs
}

// Final runs every check on the whole history.
func (r *Recorder) Final() {
	r.check(Never, time.Now())
	r.mu.Lock()
	msgs := r.leftoversLocked()
	r.mu.Unlock()
	for _, m := range msgs {
		if m != "" {
			r.logf("%s", m)
		}
	}
}

// Violations returns the violations so far.
func (r *Recorder) Violations() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.violations)
}

// Excused returns the counts of what was excused, by reason.
func (r *Recorder) Excused() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.excused {
		out[k] = v
	}
	return out
}

// Stats returns the counts so far.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.FaultKinds = map[string]int{}
	for k, v := range r.stats.FaultKinds {
		s.FaultKinds[k] = v
	}
	s.Counts = maps.Clone(r.stats.Counts)
	return s
}

// Leases returns copies of the lease records.
func (r *Recorder) Leases() []LeaseRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LeaseRec, 0, len(r.leases))
	for _, l := range r.leases {
		out = append(out, *l)
	}
	return out
}

// Stat adds n to the statistic name.
func (r *Recorder) Stat(name string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch name {
	case "refresh":
		r.stats.Refreshes += n
	case "lost-reply":
		r.stats.LostReplies += n
	case "probe":
		r.stats.Probes += n
	case "resume":
		r.stats.Resumes += n
	case "resumed":
		r.stats.Resumed += n
	case "resumed-permit":
		r.stats.ResumedPermits += n
	case "reentry":
		r.stats.Reentries += n
	default:
		if r.stats.Counts == nil {
			r.stats.Counts = map[string]int{}
		}
		r.stats.Counts[name] += n
	}
}

var _ sink = (*Recorder)(nil)

// WriteHistory writes every event of the run, in order, to w.
func (r *Recorder) WriteHistory(w io.Writer) error {
	r.mu.Lock()
	evs := slices.Clone(r.events)
	r.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	bw := bufio.NewWriter(w)
	for _, e := range evs {
		fmt.Fprintf(bw, "%v %-9s %-8s %-12s %s\n", e.At, e.Kind, e.Key, e.Lease, e.Text)
	}
	return bw.Flush()
}

// GrantedDuringUnlock counts the grants made while another lease of the
// key was being unlocked, its Done still open and its deadline ahead: the
// checker ends a lease when its holder calls Unlock (the holder no longer
// acts), while lock closes Done only when the backend answered the
// release, which may hand the key to a waiter first. Not a violation by
// that reading; counted so that the reading shows.
func (r *Recorder) GrantedDuringUnlock() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ls := range r.byKey {
		for _, a := range ls {
			if a.UnlockAt == Never || a.DoneAt == Never || a.DoneAt <= a.UnlockAt {
				continue
			}
			for _, b := range ls {
				if b != a && !compatible(a.class(), b.class()) && b.Granted > a.UnlockAt && b.Granted < a.DoneAt && b.Granted < a.Deadline {
					n++
				}
			}
		}
	}
	return n
}
