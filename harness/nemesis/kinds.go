package nemesis

// violationKinds are the kinds of Violation the nemesis reports (the
// package doc says what each means), in one place: a test finds every
// Violation literal of the package and fails on a kind missing here, and
// TestTeeth fails unless a broken variant makes each of these fire.
var violationKinds = []string{
	// the Recorder's judgement of the history
	"overlap", "over-limit", "token-order", "stale-write",
	// the holders' observations and calls
	"done-late", "refresh-not-held", "late-return", "limit-mismatch", "resume-mismatch", "note-mismatch",
	"closed-open", "unlock-open", "detach-open", "detach-refused-ended",
	"do-open", "do-ctx", "do-panic", "err-nil", "unexpected-error",
	// multi-key sets: a member kept by a failed attempt (multi.go)
	"multi-partial",
	// the run's own probes and its end
	"liveness", "held-lost", "not-ended", "no-regrant", "residue", "goroutine-leak",
	// the leader election's
	"term",
}

// kindChecks are the kinds that more than one detector reports, each
// judging its own part of the history (Violation.Check): the order of
// grants' tokens and the fenced resource's refusal of the latest grant's
// write; a call returning late and a Close returning late; a Done open
// past the deadline seen by the lease's watcher and by the call that
// returned it; a Done open after Close, for the leases Close had to end
// and for those that came from the Locker after it returned; a free key
// not granted to the prober, and a witness's waiter failed or stuck (see
// witness); grants left after the run, and what keys used once left (see
// onceResidue). TestTeeth
// holds a broken variant for each detector, which only it catches.
var kindChecks = map[string][]string{
	"token-order": {"grants", "write"},
	"late-return": {"call", "close"},
	"done-late":   {"lease", "grant"},
	"closed-open": {"close", "after-close"},
	"liveness":    {"probe", "witness"},
	"residue":     {"end", "once"},
}

// detectors are every detector of the checker: a kind, or kind/check for
// the kinds of kindChecks, in violationKinds' order.
func detectors() []string {
	var out []string
	for _, k := range violationKinds {
		if cs := kindChecks[k]; len(cs) > 0 {
			for _, c := range cs {
				out = append(out, k+"/"+c)
			}
			continue
		}
		out = append(out, k)
	}
	return out
}
