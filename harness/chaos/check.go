package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Report is what Check finds in a History.
type Report struct {
	Grants int // leases granted
	Faults int // faults injected
	Writes int // write attempts

	// Overlaps counts pairs of leases of one key whose holders both acted
	// as the holder at once: the later one was granted before the earlier
	// one's End. An overlap is excused when the earlier holder's process
	// was frozen (SIGSTOP) at the later grant and its local deadline had
	// passed by then: no lease-based lock can stop a frozen process from
	// believing it still holds, it can only tell it on waking (Done), and
	// fencing must then refuse its writes. Every other overlap is unsafe.
	Overlaps, UnsafeOverlaps int

	// StaleAccepted counts accepted writes by a lease after the Resource
	// had accepted a write of a lease granted later (the resource had
	// proof of a newer holder and still took the old one's write).
	// StaleRejected counts the same writes refused: fencing at work.
	// Both are judged by grant order, not by the tokens, so a broken
	// token makes StaleAccepted grow instead of going unnoticed.
	StaleAccepted, StaleRejected int

	// TokenRegressions counts grants whose token is not greater than the
	// token of the grant before them on the same key.
	TokenRegressions int

	// Lost counts leases that ended without their holder's Unlock (lost,
	// or still believed held) and were followed by another grant of the
	// key; DoneBeforeRegrant counts those whose Done closed before that
	// next grant (for a frozen holder: whose deadline had passed by then
	// and whose Done closed within a second of waking).
	Lost, DoneBeforeRegrant int

	// Violations describes each unsafe overlap, stale write accepted,
	// token regression and late Done, for test logs.
	Violations []string
}

// WakeBound is how soon after its process resumes a frozen holder must see
// Done closed for its lease to count as told.
const WakeBound = time.Second

// Check judges a History. It never trusts the Resource's own decisions
// beyond recording them: staleness is derived from the grant order.
func Check(h History) Report {
	r := Report{Grants: len(h.Leases), Faults: len(h.Faults), Writes: len(h.Writes)}
	byKey := map[string][]LeaseRecord{}
	for _, l := range h.Leases {
		byKey[l.Key] = append(byKey[l.Key], l)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	order := map[LeaseID]int{} // position in its key's grant order
	for _, k := range keys {
		ls := byKey[k]
		slices.SortStableFunc(ls, func(a, b LeaseRecord) int {
			return cmp.Or(cmp.Compare(a.Granted, b.Granted), cmp.Compare(a.ID, b.ID))
		})
		for i, l := range ls {
			order[l.ID] = i
		}
		r.checkLeases(h, ls)
	}
	r.checkWrites(h, order)
	return r
}

func (r *Report) violation(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// frozen returns the pause of holder that covers t, if any.
func frozen(h History, holder string, t Stamp) (Fault, bool) {
	for _, f := range h.Faults {
		if f.Kind == "pause-holder" && f.Target == holder && f.Start <= t && t < f.End {
			return f, true
		}
	}
	return Fault{}, false
}

// excused reports whether the lease's holder was frozen at t with its
// deadline passed, and woke to see Done closed promptly (or is still
// frozen).
func excused(h History, l LeaseRecord, t Stamp) bool {
	f, ok := frozen(h, l.Holder, t)
	if !ok || l.Deadline > t {
		return false
	}
	return f.End == Never || l.DoneAt <= f.End+Stamp(WakeBound) || l.KilledAt <= f.End+Stamp(WakeBound)
}

func (r *Report) checkLeases(h History, ls []LeaseRecord) {
	for i, a := range ls {
		for _, b := range ls[i+1:] {
			if b.Granted >= a.End() {
				continue
			}
			r.Overlaps++
			if !excused(h, a, b.Granted) {
				r.UnsafeOverlaps++
				r.violation("key %q: %s (lease %d, token %d, deadline %v) still acting as holder when %s was granted (lease %d, token %d) at %v",
					a.Key, a.Holder, a.ID, a.Token, a.Deadline, b.Holder, b.ID, b.Token, b.Granted)
			}
		}
		if i+1 == len(ls) {
			continue
		}
		next := ls[i+1]
		if next.Token <= a.Token {
			r.TokenRegressions++
			r.violation("key %q: token %d of %s (lease %d) not above token %d of the grant before (%s, lease %d)",
				a.Key, next.Token, next.Holder, next.ID, a.Token, a.Holder, a.ID)
		}
		if min(a.UnlockAt, a.KilledAt) < next.Granted {
			continue // released (or dead) before the next grant
		}
		r.Lost++
		if a.DoneAt <= next.Granted || excused(h, a, next.Granted) {
			r.DoneBeforeRegrant++
			continue
		}
		r.violation("key %q: lease %d of %s lost, but its Done closed at %v, after %s's grant at %v (deadline %v)",
			a.Key, a.ID, a.Holder, a.DoneAt, next.Holder, next.Granted, a.Deadline)
	}
}

func (r *Report) checkWrites(h History, order map[LeaseID]int) {
	ws := slices.Clone(h.Writes)
	slices.SortFunc(ws, func(a, b Write) int { return cmp.Compare(a.Seq, b.Seq) })
	holder := map[LeaseID]string{}
	for _, l := range h.Leases {
		holder[l.ID] = l.Holder
	}
	newest := map[string]int{} // per key: latest grant position with an accepted write, +1
	for _, w := range ws {
		pos := order[w.Lease]
		if n := newest[w.Key]; n > 0 && pos < n-1 {
			if w.Accepted {
				r.StaleAccepted++
				r.violation("key %q: stale write of %s (lease %d, token %d) accepted at %v after a later grant had written",
					w.Key, holder[w.Lease], w.Lease, w.Token, w.At)
			} else {
				r.StaleRejected++
			}
		}
		if w.Accepted && pos+1 > newest[w.Key] {
			newest[w.Key] = pos + 1
		}
	}
}
