package nemesis

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// memoryKeys are the keys a run on the memory Store used: the hot keys,
// the set keys and every liveness probe's (probe/1 to probe/N), which the residue check
// looks at.
func (r *run) memoryKeys() []string {
	keys := append(slices.Clone(r.env.keys), setKeys()...)
	for i := int64(1); i <= r.probed.Load(); i++ {
		keys = append(keys, fmt.Sprintf("probe/%d", i))
	}
	return keys
}

// awaitProbe waits, the faults healed and the load still on, until the
// liveness prober has had a probe judged (one made with no server fault
// within the target's Recovery before it), or d passed: a short run whose
// faults ran to its end judges one then, so that every run judges
// liveness at least once (see Unexercised).
func (r *run) awaitProbe(d time.Duration) {
	deadline := time.Now().Add(d)
	for r.rec.Stats().Probes == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// Unexercised says what a run of tg failed to exercise that tg declares,
// one line each: a run that asserts nothing about what it did would let a
// driver that stops granting shared leases or permits (the workers ask
// Locker.Supports) silently stop being checked that way.
//
//   - Shared: the Lockers must support shared leases, and shared leases
//     must have been granted; Permits: the Lockers must support permits, and
//     a semaphore must have been full (as many permits proven held at once
//     as its limit) at least once, so that the count check judged
//     something. A Locker that is one without the target declaring it is
//     reported too, so that the declarations stay true.
//   - Reentry: some named owner's grant must have been re-entered.
//   - Resume: a live lease's handle must have been resumed through another
//     Locker, and a Resume must have raced a Close; Notify: the pub/sub
//     adversary must have heard messages and sent some of its own.
//   - AllFaults: in a run planned for allFaultsRun or longer, with every
//     fault on, each kind of fault the nemesis may pick started at least
//     once.
//   - Every target: fenced writes accepted, at least one liveness
//     probe judged, and two terms won in the leader election; and a set
//     (LockMany, TryLockMany) granted in one step (MultiLease.Atomic)
//     where the driver takes sets in one step (driver.SetAcquirer, found
//     on the driver at run time: OneStepSets), else one granted key by
//     key, so that a driver that gains AcquireSet is checked with it at
//     once, and one whose one-step path stops granting is seen.
func (s Summary) Unexercised(tg *Target) []string {
	st := s.Stats
	var out []string
	add := func(bad bool, format string, args ...any) {
		if bad {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	add(tg.Shared && !s.SharedLeases, "%s declares Shared, but its Locker has no shared leases: none was asked for", tg.Name)
	add(!tg.Shared && s.SharedLeases, "%s's Locker grants shared leases, but the target does not declare Shared", tg.Name)
	add(tg.Shared && s.SharedLeases && st.Shared == 0, "%s: no shared lease granted", tg.Name)
	add(tg.Permits && !s.Permits, "%s declares Permits, but its Locker has no permits: none was asked for", tg.Name)
	add(!tg.Permits && s.Permits, "%s's Locker grants permits, but the target does not declare Permits", tg.Name)
	add(tg.Permits && s.Permits && st.PermitsFull == 0, "%s: no semaphore filled (%d permits granted): the count check judged nothing", tg.Name, st.Permits)
	add(tg.Reentry && st.Reentries == 0, "%s: no re-entry of a named owner's grant", tg.Name)
	add(tg.Resume && st.Counts["live-resumed"] == 0, "%s: no live lease's handle resumed through another Locker (%d tried)", tg.Name, st.Counts["live-resume"])
	add(tg.Resume && st.Counts["race"] == 0, "%s: no Resume raced a Close of its Locker", tg.Name)
	adv := tg.Notify && !s.FaultsLimited
	add(adv && s.Adversary["heard"] == 0, "%s: the pub/sub adversary heard no message", tg.Name)
	add(adv && s.adversarySent() == 0, "%s: the pub/sub adversary sent nothing", tg.Name)
	if tg.AllFaults && !s.FaultsLimited && s.Planned >= allFaultsRun {
		for _, k := range s.FaultKinds {
			add(s.Injected[k] == 0, "%s: no %s fault injected in %v", tg.Name, k, s.Planned)
		}
	}
	add(st.Accepted == 0, "%s: no fenced write accepted (%d writes)", tg.Name, st.Writes)
	add(st.Probes == 0, "%s: no liveness probe judged", tg.Name)
	add(s.OneStepSets && st.Counts["set-atomic"] == 0, "%s: no set granted in one step, though its driver is a driver.SetAcquirer (%d sets granted key by key, %d attempts)",
		tg.Name, st.Counts["set-by-key"], st.Counts["lockmany"]+st.Counts["trylockmany"])
	add(!s.OneStepSets && st.Counts["set-by-key"] == 0, "%s: no set granted key by key (%d attempts)", tg.Name, st.Counts["lockmany"]+st.Counts["trylockmany"])
	add(st.Counts["terms"] < 2, "%s: fewer than two terms won in the leader election (%d): the term check judged nothing", tg.Name, st.Counts["terms"])
	return out
}

// only keeps the faults of ks that the run's Config.Faults names, all of
// them if it names none.
func (n *nemesis) only(ks []fault) []fault {
	if len(n.r.cfg.Faults) == 0 {
		return ks
	}
	return slices.DeleteFunc(ks, func(f fault) bool { return !slices.Contains(n.r.cfg.Faults, f.name) })
}

// adversarySent counts the messages the pub/sub adversary published
// (not the calls the PostgreSQL one tried, nor its Inspects).
func (s Summary) adversarySent() int {
	n := 0
	for kind, c := range s.Adversary {
		switch {
		case kind == "heard", kind == "heard-own", kind == "skipped", kind == "reconnect", kind == "publish-failed", kind == "inspect-failed",
			strings.HasPrefix(kind, "call-"):
		default:
			n += c
		}
	}
	return n
}
