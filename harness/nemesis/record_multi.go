package nemesis

import "fmt"

// leftoversLocked judges the multi-held events (multi.go), once every
// lease of the run has been reported: a holder whose owner token is no
// lease's of the run is a member kept by a failed set attempt
// (multi-partial). A named owner's holder shows the owner's 16 digits,
// which match its leases' tokens' first 16.
func (r *Recorder) leftoversLocked() []string {
	known := map[string]bool{}
	for _, l := range r.leases {
		if l.Grant == "" {
			continue
		}
		known[l.Key+"\x00"+l.Grant] = true
		if len(l.Grant) > 16 {
			known[l.Key+"\x00"+l.Grant[:16]] = true
		}
	}
	var msgs []string
	for _, e := range r.events {
		if e.Kind != "multi-held" || known[e.Key+"\x00"+e.Lease] || r.judged[e] || !r.calmLocked(e.From, e.At) {
			continue
		}
		if r.setInFlightLocked(e) {
			r.judged[e] = true
			r.excused["multi-held by a set attempt under way"]++
			continue
		}
		r.judged[e] = true
		msgs = append(msgs, r.violateLocked(Violation{Kind: "multi-partial", At: e.At, From: e.At, Key: e.Key,
			Text: fmt.Sprintf("key %q: %s; no lease of the run has that owner: a member kept by a failed set attempt", e.Key, e.Text)}))
	}
	return msgs
}

// setInFlightLocked reports whether a set attempt that failed (a
// set-failed event: multi.go) on e's key was under way from before the
// holder was first seen until after it was seen again, plus Recovery for
// its clean-up: a LockMany that takes its keys one by one holds (and
// renews) those it took while it waits for the next, up to its context's
// end (6 s), and, failing, releases them as it returns; the holder may be
// its member, whose owner no lease of the run has.
func (r *Recorder) setInFlightLocked(e Event) bool {
	for _, f := range r.events {
		if f.Kind == "set-failed" && f.Key == e.Key && f.From <= e.From && f.At+Stamp(r.recovery) >= e.At {
			return true
		}
	}
	return false
}

// setLossLocked reports whether l is a set's member and the backend lost
// its state during the call that took the set: the member may have been
// granted before the loss (its key waited for a later one), and another
// lease of its key after it, recorded before l. Exclusion is not
// guaranteed across a state loss, fencing is: such an overlap, token
// order or refused write is excused, as the overlaps of a call that
// straddles a loss are.
func (r *Recorder) setLossLocked(l *LeaseRec) bool {
	return l.Set && r.stateLostLocked(l.askedAt(), l.Granted)
}

// calmLocked reports whether no server fault, nor a frozen process, was
// under way at some moment of [from, to], nor within the target's
// Recovery before it: a grant whose clean-up such a fault held up (a
// ZooKeeper node whose session outlives a server restart, deleted by the
// driver's janitor once the server is back) may outlive its TTL then.
func (r *Recorder) calmLocked(from, to Stamp) bool {
	lo := from - Stamp(r.recovery)
	for _, f := range r.faults {
		if (f.Server || f.Frozen != "") && f.Start <= to && f.End >= lo {
			return false
		}
	}
	return true
}
