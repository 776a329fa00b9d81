package chaos

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Stamp is a moment on a Resource's clock: the time since the Resource was
// made, read from this process's monotonic clock. Every event of a history
// is stamped on that one clock, whoever reports it.
type Stamp time.Duration

// Never is the Stamp of an event that did not happen.
const Never = Stamp(math.MaxInt64)

func (s Stamp) String() string {
	if s == Never {
		return "never"
	}
	return time.Duration(s).Round(time.Microsecond).String()
}

// LeaseID names one grant reported to a Resource.
type LeaseID int

// Resource is a fenced resource for tests: per key it accepts a write only
// if the write's fencing token is at least the highest token it has
// accepted for that key. It records every write attempt, and every grant,
// unlock, loss, kill and fault reported to it, each stamped on its one
// monotonic clock when the report arrives, for Check.
//
// Holders in this process report directly; holders in child processes
// report through the parent (see the holder protocol in the tests), so the
// parent stamps their events on the same clock. A report that travels is
// stamped a little after the event: grants and losses look later than they
// were, deadlines (reported as a remaining duration) look later too. Each
// of those errs on the side of finding a violation, not hiding one.
type Resource struct {
	start time.Time

	mu     sync.Mutex
	seq    int
	high   map[string]uint64 // highest accepted token per key
	has    map[string]bool   // a write was accepted for the key
	leases []*LeaseRecord
	writes []Write
	faults []*Fault
}

// LeaseRecord is one grant as a Resource saw it.
type LeaseRecord struct {
	ID     LeaseID
	Key    string
	Holder string
	Token  uint64
	// Granted is when the grant was reported (the holder's Lock returned).
	Granted Stamp
	// Deadline is the lease's local validity deadline as last reported.
	Deadline Stamp
	// UnlockAt is when the holder called Unlock (it stopped acting as the
	// holder then), DoneAt when it saw Done closed, KilledAt when its
	// process was killed. Never when it did not happen.
	UnlockAt, DoneAt, KilledAt Stamp
	// Err is Lease.Err() when Done closed; UnlockErr Unlock's result.
	Err, UnlockErr string
}

// End is when the holder stopped acting as the holder: it called Unlock,
// saw Done closed, or died, whichever came first.
func (l *LeaseRecord) End() Stamp { return min(l.UnlockAt, l.DoneAt, l.KilledAt) }

// Write is one write attempt on a Resource.
type Write struct {
	Seq      int // order in which the Resource decided
	At       Stamp
	Lease    LeaseID
	Key      string
	Token    uint64
	Accepted bool
}

// Fault is one injected fault: a pause, a kill, a partition, a lost reply.
type Fault struct {
	Kind   string // "pause-holder", "kill-holder", "pause-server", ...
	Target string // the holder's name, or the server's
	Start  Stamp
	End    Stamp // Never while it lasts (and for instantaneous faults: Start)
}

// NewResource returns an empty Resource whose clock starts now.
func NewResource() *Resource {
	return &Resource{start: time.Now(), high: map[string]uint64{}, has: map[string]bool{}}
}

// Now returns the current Stamp.
func (r *Resource) Now() Stamp { return Stamp(time.Since(r.start)) }

// At converts a time of this process (with its monotonic reading) to a Stamp.
func (r *Resource) At(t time.Time) Stamp { return Stamp(t.Sub(r.start)) }

// Grant records that holder was granted key with token; its local deadline
// is deadlineIn from now. It returns the lease's ID for later reports.
func (r *Resource) Grant(key, holder string, token uint64, deadlineIn time.Duration) LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Now()
	l := &LeaseRecord{
		ID: LeaseID(len(r.leases) + 1), Key: key, Holder: holder, Token: token,
		Granted: now, Deadline: now + Stamp(deadlineIn),
		UnlockAt: Never, DoneAt: Never, KilledAt: Never,
	}
	r.leases = append(r.leases, l)
	return l.ID
}

func (r *Resource) lease(id LeaseID) (*LeaseRecord, error) {
	if id < 1 || int(id) > len(r.leases) {
		return nil, fmt.Errorf("chaos: unknown lease %d", id)
	}
	return r.leases[id-1], nil
}

// Write attempts a write on the lease's key carrying token, and reports
// whether the Resource accepted it: it does if token is at least the
// highest token accepted for the key so far. deadline, if positive,
// updates the lease's reported deadline (it moves with each refresh); a
// holder that reports from afar stamps it when the report arrives, which
// may be long before the write is applied.
func (r *Resource) Write(id LeaseID, token uint64, deadline Stamp) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, err := r.lease(id)
	if err != nil {
		return false, err
	}
	now := r.Now()
	if deadline > 0 {
		l.Deadline = deadline
	}
	ok := !r.has[l.Key] || token >= r.high[l.Key]
	if ok {
		r.has[l.Key] = true
		r.high[l.Key] = max(r.high[l.Key], token)
	}
	r.seq++
	r.writes = append(r.writes, Write{Seq: r.seq, At: now, Lease: id, Key: l.Key, Token: token, Accepted: ok})
	return ok, nil
}

// Done records that the lease's holder saw Done closed, with Err().
func (r *Resource) Done(id LeaseID, errText string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, err := r.lease(id); err == nil && l.DoneAt == Never {
		l.DoneAt, l.Err = r.Now(), errText
	}
}

// Unlocking records that the holder is about to call Unlock: from now on it
// no longer acts as the holder.
func (r *Resource) Unlocking(id LeaseID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, err := r.lease(id); err == nil && l.UnlockAt == Never {
		l.UnlockAt = r.Now()
	}
}

// Unlocked records Unlock's result ("" for success).
func (r *Resource) Unlocked(id LeaseID, errText string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, err := r.lease(id); err == nil {
		l.UnlockErr = errText
	}
}

// Killed records that holder's process was killed now: its open leases
// end here, and a "kill-holder" fault is recorded.
func (r *Resource) Killed(holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Now()
	for _, l := range r.leases {
		if l.Holder == holder && l.End() == Never {
			l.KilledAt = now
		}
	}
	r.faults = append(r.faults, &Fault{Kind: "kill-holder", Target: holder, Start: now, End: now})
}

// FaultStart records the start of a fault and returns a function that
// records its end (call it at most once; instantaneous faults call it at
// once).
func (r *Resource) FaultStart(kind, target string) (end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &Fault{Kind: kind, Target: target, Start: r.Now(), End: Never}
	r.faults = append(r.faults, f)
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			f.End = r.Now()
			r.mu.Unlock()
		})
	}
}

// Lease returns a copy of the lease's record.
func (r *Resource) Lease(id LeaseID) (LeaseRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, err := r.lease(id)
	if err != nil {
		return LeaseRecord{}, false
	}
	return *l, true
}

// AcceptedWrites returns how many writes of the lease were accepted.
func (r *Resource) AcceptedWrites(id LeaseID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.writes {
		if w.Lease == id && w.Accepted {
			n++
		}
	}
	return n
}

// History is a copy of everything a Resource recorded.
type History struct {
	Leases []LeaseRecord
	Writes []Write
	Faults []Fault
}

// History returns a copy of the record so far.
func (r *Resource) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{Writes: slices.Clone(r.writes)}
	for _, l := range r.leases {
		h.Leases = append(h.Leases, *l)
	}
	for _, f := range r.faults {
		h.Faults = append(h.Faults, *f)
	}
	return h
}
