package nemesis

import (
	"sync/atomic"
	"time"
)

// owed says which of the operations a target declares the run has not
// exercised yet (see Summary.Unexercised): a live resume, a Resume racing
// Close, a semaphore filled, a named owner's grant re-entered, a set
// granted in one step (or key by key: see setGrant). They are rare draws
// of the workers' random choices, and a short run can end without one. Once a run is under way
// (owedAfter) and one is still owed, the workers of the test process
// choose it far more often until the Recorder has counted one: so that
// every run, the 10 s passes of make test included, exercises what its
// target declares, without making them common in long runs.
type owed struct {
	liveResume, race, fill, reentry atomic.Bool
	// set: no set granted yet the way the driver must grant them (in
	// one step, or key by key: see Summary.Unexercised); the workers then
	// try sets of set keys (multi.go) more often.
	set atomic.Bool
}

// owedAfter is how long into a run the debts are called in.
const owedAfter = 2 * time.Second

// pOwed is the chance of an owed operation where it can be chosen;
// pOwedSet an owed set's (lower: a set takes 2 or 3 of 4 set keys, and
// sets tried by many workers at once would keep each other out).
const (
	pOwed    = 0.5
	pOwedSet = 0.15
)

// oweLoop updates the debts of the test process's workers from the
// Recorder's counts, until stop.
func (r *run) oweLoop(stop <-chan struct{}) {
	o := r.env.owed
	begun := time.Now()
	every(200*time.Millisecond, stop, func() {
		if time.Since(begun) < owedAfter {
			return
		}
		st := r.rec.Stats()
		o.liveResume.Store(r.tg.Resume && st.Counts["live-resumed"] == 0)
		o.race.Store(r.tg.Resume && st.Counts["race"] == 0)
		o.fill.Store(r.tg.Permits && st.PermitsFull == 0)
		o.reentry.Store(r.tg.Reentry && st.Reentries == 0)
		o.set.Store(st.Counts[r.setGrant()] == 0)
	})
}

// owes reports whether the debt d is owed (never in a child process,
// whose env has none).
func (e *procEnv) owes(d func(*owed) *atomic.Bool) bool {
	return e.owed != nil && d(e.owed).Load()
}

// owedWait bounds how long a run's load goes on, the faults healed, for
// the debts still owed.
const owedWait = 15 * time.Second

// awaitOwed waits, the faults healed and the load still on, until the
// test process's workers owe nothing, or d passed.
func (r *run) awaitOwed(d time.Duration) {
	o := r.env.owed
	deadline := time.Now().Add(d)
	time.Sleep(250 * time.Millisecond) // one update of oweLoop's
	for (o.liveResume.Load() || o.race.Load() || o.fill.Load() || o.reentry.Load() || o.set.Load()) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// owedFaultsAfter is how long into a run the nemesis of a target that
// declares AllFaults starts trying the kinds of fault it has not
// injected yet first (see nemesis.injectDue): after the first phase,
// whose choice is the weights' alone.
const owedFaultsAfter = 8 * time.Second

// allFaultsRun is the shortest run whose faults must all have been
// injected, on a target that declares AllFaults (a make nemesis run; the
// 10 s pass of make test is too short for every kind).
const allFaultsRun = time.Minute

// setGrant is the count of set grants the run must have (see
// Unexercised): "set-atomic" where the driver takes sets in one step,
// else "set-by-key".
func (r *run) setGrant() string {
	if r.oneStep {
		return "set-atomic"
	}
	return "set-by-key"
}
