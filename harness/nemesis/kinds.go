package nemesis

// violationKinds are the kinds of Violation the nemesis reports (the
// package doc says what each means), in one place: a test finds every
// Violation literal of the package and fails on a kind missing here, and
// TestTeeth fails unless a broken variant makes each of these fire.
var violationKinds = []string{
	// the Recorder's judgement of the history
	"overlap", "over-limit", "token-order", "stale-write",
	// the holders' observations and calls
	"done-late", "refresh-not-held", "late-return", "limit-mismatch", "resume-mismatch",
	"closed-open", "unlock-open", "detach-open", "detach-refused-ended",
	"do-open", "do-ctx", "do-panic", "err-nil", "unexpected-error",
	// the run's own probes and its end
	"liveness", "not-ended", "no-regrant", "residue", "goroutine-leak",
}
