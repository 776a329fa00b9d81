package nemesis

import (
	"fmt"
	"sort"
	"time"
)

// termLag is how long after a term ended the checker waits for late
// reports (a child's, over RPC) before it judges the term.
const termLag = 2 * time.Second

// termEnd is when the leader of term l stopped acting as one: it saw the
// term's Done closed, or began to resign; Never while neither.
func termEnd(l *LeaseRec) Stamp { return min(l.DoneAt, l.UnlockAt) }

// termsLocked judges the terms of the election that ended at least
// termLag ago (every term, at the end of the run): no other term may be
// granted between a term's grant and its end, as its leader saw it (its
// Done closed, or its resignation), DoneSlack aside; and the next term's
// number must be above its own. An overlap is a timing judgement, excused
// where the leader's process was frozen or starved meanwhile (pending),
// and where the backend lost its state between the two grants.
func (r *Recorder) termsLocked(final bool) []string {
	var msgs []string
	ls := r.byKey[electionKey]
	now := r.clk.Now()
	for i, a := range ls {
		if !isTerm(a) || r.termsJudged[a.ID] {
			continue
		}
		end := termEnd(a)
		if end == Never && final {
			continue // not ended: not-ended reports it
		}
		if !final && (end == Never || now-end < Stamp(termLag)) {
			continue
		}
		r.termsJudged[a.ID] = true
		next := -1
		for j := i + 1; j < len(ls); j++ {
			if isTerm(ls[j]) {
				next = j
				break
			}
		}
		if next < 0 {
			if final {
				continue
			}
			delete(r.termsJudged, a.ID) // the next term may yet come
			continue
		}
		b := ls[next]
		if b.Token <= a.Token {
			msgs = append(msgs, r.violateLocked(Violation{Kind: "term", At: b.Granted, From: a.Granted, Key: electionKey, Proc: b.Proc, Lease: b.ID,
				Text: fmt.Sprintf("term %d granted after term %d: terms must increase:\n  %v\n  %v", b.Token, a.Token, a, b)}))
		}
		r.judgeOverlap(a, ls[next:], end, final)
	}
	return msgs
}

// judgeOverlap reports the first term of later (granted after a, in grant
// order) granted DoneSlack or more before a's end.
func (r *Recorder) judgeOverlap(a *LeaseRec, later []*LeaseRec, end Stamp, final bool) {
	arrived := time.Now()
	if final {
		arrived = time.Time{} // judged in this very check
	}
	k := sort.Search(len(later), func(k int) bool { return later[k].Granted+Stamp(DoneSlack) >= end })
	for _, b := range later[:k] {
		if !isTerm(b) {
			continue
		}
		if r.stateLostLocked(a.askedAt(), b.Granted) {
			r.excused["term overlap across a state loss"]++
			return
		}
		r.pending = append(r.pending, pendingViolation{Violation{Kind: "term", At: end, From: b.Granted, Key: electionKey, Proc: a.Proc, Lease: b.ID,
			Over: time.Duration(end - b.Granted),
			Text: fmt.Sprintf("term %d elected %v before the leader of term %d stopped (its Done seen closed, or its resignation, at %v):\n  %v\n  %v",
				b.Token, time.Duration(end-b.Granted).Round(time.Millisecond), a.Token, end, a, b)}, arrived})
		return
	}
}
