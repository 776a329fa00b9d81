package chaos

import (
	"testing"
	"time"
)

// Histories written by hand, to show that each check fires on what it is
// meant to catch and stays quiet otherwise. ms makes stamps readable.
func ms(n int) Stamp { return Stamp(time.Duration(n) * time.Millisecond) }

type hist struct {
	History
	leases []*LeaseRecord
	seq    int
}

func (h *hist) lease(holder string, token uint64, granted, deadline Stamp) *LeaseRecord {
	l := &LeaseRecord{
		ID: LeaseID(len(h.leases) + 1), Key: "k", Holder: holder, Token: token,
		Granted: granted, Deadline: deadline, UnlockAt: Never, DoneAt: Never, KilledAt: Never,
	}
	h.leases = append(h.leases, l)
	return l
}

// check runs Check on the history as written so far.
func (h *hist) check() Report {
	hh := h.History
	hh.Leases = nil
	for _, l := range h.leases {
		hh.Leases = append(hh.Leases, *l)
	}
	return Check(hh)
}

func (h *hist) write(l *LeaseRecord, at Stamp, accepted bool) {
	h.seq++
	h.Writes = append(h.Writes, Write{Seq: h.seq, At: at, Lease: l.ID, Key: l.Key, Token: l.Token, Accepted: accepted})
}

func (h *hist) pause(holder string, start, end Stamp) {
	h.Faults = append(h.Faults, Fault{Kind: "pause-holder", Target: holder, Start: start, End: end})
}

func TestCheckCleanHandover(t *testing.T) {
	var h hist
	a := h.lease("A", 1, ms(0), ms(1000))
	h.write(a, ms(10), true)
	a.UnlockAt, a.DoneAt = ms(20), ms(21)
	b := h.lease("B", 2, ms(30), ms(1030))
	h.write(b, ms(40), true)
	b.UnlockAt, b.DoneAt = ms(50), ms(51)
	r := h.check()
	if r.Grants != 2 || r.Overlaps != 0 || r.StaleAccepted+r.StaleRejected != 0 || r.TokenRegressions != 0 || r.Lost != 0 || len(r.Violations) != 0 {
		t.Errorf("clean handover: %+v", r)
	}
}

// A frozen past its deadline, B granted and writing, A's late write
// refused, A told on waking: one excused overlap, fencing at work.
func TestCheckFrozenHolderFenced(t *testing.T) {
	var h hist
	a := h.lease("A", 1, ms(0), ms(990))
	h.write(a, ms(10), true)
	h.pause("A", ms(100), ms(1500))
	b := h.lease("B", 2, ms(1100), ms(2100))
	h.write(b, ms(1110), true)
	h.write(a, ms(1501), false) // A's write, decided before the pause
	a.DoneAt = ms(1502)
	r := h.check()
	if r.Overlaps != 1 || r.UnsafeOverlaps != 0 || r.StaleRejected != 1 || r.StaleAccepted != 0 ||
		r.Lost != 1 || r.DoneBeforeRegrant != 1 || len(r.Violations) != 0 {
		t.Errorf("frozen holder, fenced: %+v", r)
	}
}

// The same without fencing (tokens equal, as the seeds had): the late
// write is accepted, and the checker says so without trusting tokens.
func TestCheckStaleAcceptedWithoutFencing(t *testing.T) {
	var h hist
	a := h.lease("A", 0, ms(0), ms(990))
	h.pause("A", ms(100), ms(1500))
	b := h.lease("B", 0, ms(1100), ms(2100))
	h.write(b, ms(1110), true)
	h.write(a, ms(1501), true)
	a.DoneAt = ms(1502)
	r := h.check()
	if r.StaleAccepted != 1 || r.TokenRegressions != 1 || r.UnsafeOverlaps != 0 {
		t.Errorf("no fencing: %+v", r)
	}
}

// A write by an older lease before any newer lease wrote is not stale:
// the resource could not know yet.
func TestCheckWriteBeforeNewerWriteIsNotStale(t *testing.T) {
	var h hist
	a := h.lease("A", 1, ms(0), ms(990))
	h.pause("A", ms(100), ms(1500))
	b := h.lease("B", 2, ms(1100), ms(2100))
	h.write(a, ms(1501), true)
	h.write(b, ms(1600), true)
	a.DoneAt = ms(1502)
	if r := h.check(); r.StaleAccepted != 0 || r.StaleRejected != 0 {
		t.Errorf("write before the newer lease wrote: %+v", r)
	}
}

// B and C both running and both believing they hold: unsafe, and B's
// Done after C's grant is a late Done.
func TestCheckUnsafeOverlap(t *testing.T) {
	var h hist
	b := h.lease("B", 2, ms(0), ms(1000))
	c := h.lease("C", 3, ms(500), ms(1500))
	b.UnlockAt, b.DoneAt = ms(800), ms(801)
	c.UnlockAt, c.DoneAt = ms(900), ms(901)
	r := h.check()
	if r.Overlaps != 1 || r.UnsafeOverlaps != 1 || r.Lost != 1 || r.DoneBeforeRegrant != 0 || len(r.Violations) != 2 {
		t.Errorf("unsafe overlap: %+v", r)
	}
}

// A frozen holder whose deadline had not passed at the next grant is not
// excused: the backend let go of a grant the holder's clock still counted
// as valid.
func TestCheckFrozenBeforeDeadlineIsUnsafe(t *testing.T) {
	var h hist
	a := h.lease("A", 1, ms(0), ms(2000))
	h.pause("A", ms(100), ms(1500))
	h.lease("B", 2, ms(1100), ms(2100))
	a.DoneAt = ms(1502)
	if r := h.check(); r.UnsafeOverlaps != 1 || r.DoneBeforeRegrant != 0 {
		t.Errorf("frozen before its deadline: %+v", r)
	}
}

// A frozen holder that wakes and is not told (Done stays open) is a late
// Done even though its deadline had passed.
func TestCheckFrozenNotToldOnWaking(t *testing.T) {
	var h hist
	a := h.lease("A", 1, ms(0), ms(990))
	h.pause("A", ms(100), ms(1500))
	h.lease("B", 2, ms(1100), ms(2100))
	a.DoneAt = ms(1500) + Stamp(WakeBound) + ms(1)
	if r := h.check(); r.UnsafeOverlaps != 1 || r.Lost != 1 || r.DoneBeforeRegrant != 0 {
		t.Errorf("not told on waking: %+v", r)
	}
}

// A killed holder stops acting at its death: no overlap, no lost lease.
func TestCheckKilledHolder(t *testing.T) {
	var h hist
	a := h.lease("A", 1, ms(0), ms(990))
	a.KilledAt = ms(100)
	h.lease("B", 2, ms(1100), ms(2100))
	if r := h.check(); r.Overlaps != 0 || r.Lost != 0 || len(r.Violations) != 0 {
		t.Errorf("killed holder: %+v", r)
	}
}

// Grants whose tokens go backwards are regressions, and the fresh
// holder's writes refused by the resource are not counted as stale.
func TestCheckTokenRegression(t *testing.T) {
	var h hist
	a := h.lease("A", 5, ms(0), ms(990))
	h.write(a, ms(10), true)
	a.UnlockAt, a.DoneAt = ms(20), ms(21)
	b := h.lease("B", 3, ms(30), ms(1030))
	h.write(b, ms(40), false)
	r := h.check()
	if r.TokenRegressions != 1 || r.StaleRejected != 0 || r.StaleAccepted != 0 {
		t.Errorf("token regression: %+v", r)
	}
}

// The Resource's own rule: a write is accepted iff its token is at least
// the highest accepted so far for its key.
func TestResourceFencing(t *testing.T) {
	r := NewResource()
	a := r.Grant("k", "A", 1, time.Second)
	b := r.Grant("k", "B", 2, time.Second)
	o := r.Grant("other", "O", 1, time.Second)
	for i, w := range []struct {
		id   LeaseID
		tok  uint64
		want bool
	}{{a, 1, true}, {b, 2, true}, {a, 1, false}, {b, 2, true}, {o, 1, true}} {
		if got, err := r.Write(w.id, w.tok, 0); err != nil || got != w.want {
			t.Errorf("write %d (lease %d, token %d): %v, %v; want %v", i, w.id, w.tok, got, err, w.want)
		}
	}
	if _, err := r.Write(99, 1, 0); err == nil {
		t.Error("write of an unknown lease: no error")
	}
	if n := r.AcceptedWrites(b); n != 2 {
		t.Errorf("AcceptedWrites(B) = %d, want 2", n)
	}
}

// driverFailures, the verdict on a real driver's run, fails a row with any
// one defect and passes a good one. The good row is Check's report of a
// frozen holder fenced off (an excused overlap, a stale write refused, a
// lost lease told in time); each bad row adds one defect to it.
func TestDriverVerdict(t *testing.T) {
	var h hist
	a := h.lease("A", 1, ms(0), ms(990))
	h.write(a, ms(10), true)
	h.pause("A", ms(100), ms(1500))
	b := h.lease("B", 2, ms(1100), ms(2100))
	h.write(b, ms(1110), true)
	h.write(a, ms(1501), false)
	a.DoneAt = ms(1502)
	good := Row{Target: "driver", Scenario: "verdict", Report: h.check(), Recovered: true}
	if fails := driverFailures(good, true, nil); len(fails) != 0 {
		t.Fatalf("a good row fails: %q (report %+v)", fails, good.Report)
	}
	bad := []struct {
		name      string
		change    func(r *Row)
		excusable bool // passes where the backend loses its state (no exclusion)
	}{
		{"an unsafe overlap", func(r *Row) { r.Report.UnsafeOverlaps = 1 }, true},
		{"an accepted stale write", func(r *Row) { r.Report.StaleAccepted = 1 }, false},
		{"a late Done", func(r *Row) { r.Report.DoneBeforeRegrant = r.Report.Lost - 1 }, true},
		{"a token regression", func(r *Row) { r.Report.TokenRegressions = 1 }, false},
		{"an orphan", func(r *Row) { r.Orphans = 1 }, false},
		{"a goroutine leak", func(r *Row) { r.Leaks = 1 }, false},
		{"no grant after the fault", func(r *Row) { r.Recovered = false }, false},
	}
	for _, tc := range bad {
		row := good
		tc.change(&row)
		if fails := driverFailures(row, true, nil); len(fails) != 1 {
			t.Errorf("%s: failures %q; want one", tc.name, fails)
		}
		fails := driverFailures(row, false, nil)
		if tc.excusable && len(fails) != 0 {
			t.Errorf("%s without exclusion (state lost): failures %q; want none", tc.name, fails)
		}
		if !tc.excusable && len(fails) != 1 {
			t.Errorf("%s without exclusion (state lost): failures %q; want one", tc.name, fails)
		}
	}
	if fails := driverFailures(good, true, []string{"the holder was not frozen"}); len(fails) != 1 {
		t.Errorf("a problem of the choreography: failures %q; want it", fails)
	}
}
