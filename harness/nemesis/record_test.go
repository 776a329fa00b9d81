package nemesis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// The checker's own tests: histories written by hand, no server.

func ms2s(n int) Stamp { return Stamp(time.Duration(n) * time.Millisecond) }

func newTestRecorder(t *testing.T) *Recorder {
	return NewRecorder(NewClock(monotonic()), func(string, ...any) {}, "replay")
}

// lease records a lease of key granted at g (ms) and proven held until h.
func lease(r *Recorder, id, key string, shared bool, token uint64, g, h int) {
	r.Grant(LeaseRec{ID: id, Key: key, Shared: shared, Holder: "L", Proc: parentProc, Op: "lock", Token: token,
		Granted: ms2s(g), LastHeld: ms2s(g), Deadline: ms2s(h + 1000), UnlockAt: Never, DoneAt: Never})
	r.Held(id, ms2s(h), ms2s(h+1000))
}

func kinds(r *Recorder) []string {
	var out []string
	for _, v := range r.Violations() {
		out = append(out, v.Kind)
	}
	return out
}

func TestOverlaps(t *testing.T) {
	cases := []struct {
		name   string
		build  func(r *Recorder)
		want   []string
		excuse string
	}{
		{"one after the other", func(r *Recorder) {
			lease(r, "a", "k", false, 1, 0, 100)
			lease(r, "b", "k", false, 2, 101, 200)
		}, nil, ""},
		{"exclusive over exclusive", func(r *Recorder) {
			lease(r, "a", "k", false, 1, 0, 100)
			lease(r, "b", "k", false, 2, 100, 200)
		}, []string{"overlap"}, ""},
		{"granted inside another's interval", func(r *Recorder) {
			lease(r, "a", "k", false, 1, 0, 1000)
			lease(r, "b", "k", false, 2, 300, 310)
		}, []string{"overlap"}, ""},
		{"other keys", func(r *Recorder) {
			lease(r, "a", "k", false, 1, 0, 100)
			lease(r, "b", "j", false, 1, 50, 200)
		}, nil, ""},
		{"shared with shared", func(r *Recorder) {
			lease(r, "a", "k", true, 1, 0, 100)
			lease(r, "b", "k", true, 2, 50, 200)
		}, nil, ""},
		{"shared with exclusive", func(r *Recorder) {
			lease(r, "a", "k", true, 1, 0, 100)
			lease(r, "b", "k", false, 2, 50, 200)
		}, []string{"overlap"}, ""},
		{"across a state loss", func(r *Recorder) {
			lease(r, "a", "k", false, 1, 0, 100)
			r.faults = append(r.faults, &Fault{Kind: "server-restart-volatile", Start: ms2s(20), End: ms2s(30), StateLoss: true})
			lease(r, "b", "k", false, 2, 50, 200)
		}, nil, "overlap across a state loss"},
		{"dead on arrival", func(r *Recorder) {
			lease(r, "a", "k", false, 1, 0, 100)
			r.Grant(LeaseRec{ID: "b", Key: "k", Token: 2, Granted: ms2s(50), DOA: true, LastHeld: Never, UnlockAt: Never, DoneAt: Never})
		}, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTestRecorder(t)
			c.build(r)
			r.Final()
			if got := kinds(r); strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("violations %v, want %v: %v", got, c.want, r.Violations())
			}
			if c.excuse != "" && r.Excused()[c.excuse] == 0 {
				t.Errorf("nothing excused as %q: %v", c.excuse, r.Excused())
			}
		})
	}
}

func TestTokenOrder(t *testing.T) {
	r := newTestRecorder(t)
	lease(r, "a", "k", false, 5, 0, 10)
	lease(r, "b", "k", false, 4, 20, 30) // lower than a's
	lease(r, "c", "k", true, 7, 40, 100)
	lease(r, "d", "k", true, 6, 41, 100) // shared after shared: any order
	lease(r, "e", "k", false, 7, 200, 210)
	r.Final()
	var ids []string
	for _, v := range r.Violations() {
		if v.Kind != "token-order" {
			t.Errorf("unexpected %v", v)
		}
		ids = append(ids, v.Lease)
	}
	if strings.Join(ids, ",") != "b,e" {
		t.Errorf("token-order violations of %v, want b and e", ids)
	}
}

// permit records a permit of a semaphore of limit on key, granted at g
// (ms) and proven held until h.
func permit(r *Recorder, id, key string, limit int, token uint64, g, h int) {
	r.Grant(LeaseRec{ID: id, Key: key, Limit: limit, Holder: "L", Proc: parentProc, Op: "acquire", Token: token,
		Granted: ms2s(g), LastHeld: ms2s(g), Deadline: ms2s(h + 1000), UnlockAt: Never, DoneAt: Never})
	r.Held(id, ms2s(h), ms2s(h+1000))
}

func TestPermits(t *testing.T) {
	cases := []struct {
		name   string
		build  func(r *Recorder)
		want   []string
		excuse string
		full   int
	}{
		{"two of two", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 100)
			permit(r, "b", "k", 2, 2, 50, 200)
		}, nil, "", 1},
		{"three of two", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 100)
			permit(r, "b", "k", 2, 2, 50, 200)
			permit(r, "c", "k", 2, 3, 90, 300)
		}, []string{"over-limit"}, "", 2},
		{"three of three", func(r *Recorder) {
			permit(r, "a", "k", 3, 1, 0, 100)
			permit(r, "b", "k", 3, 2, 50, 200)
			permit(r, "c", "k", 3, 3, 90, 300)
		}, nil, "", 1},
		{"three of two, never all at once", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 100)
			permit(r, "b", "k", 2, 2, 50, 200)
			permit(r, "c", "k", 2, 3, 101, 300)
		}, nil, "", 2},
		{"a third granted inside a long one", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 1000)
			permit(r, "b", "k", 2, 2, 100, 200)
			permit(r, "c", "k", 2, 3, 300, 400)
			permit(r, "d", "k", 2, 4, 350, 360) // c and d inside a
		}, []string{"over-limit"}, "", 3},
		{"reported late", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 100)
			permit(r, "c", "k", 2, 3, 90, 300)
			r.Check(ms2s(0))
			permit(r, "b", "k", 2, 2, 50, 200)
		}, []string{"over-limit"}, "", 2},
		{"other keys", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 100)
			permit(r, "b", "k", 2, 2, 50, 200)
			permit(r, "c", "j", 2, 1, 60, 300)
		}, nil, "", 1},
		{"permit with exclusive", func(r *Recorder) {
			permit(r, "a", "k", 3, 1, 0, 100)
			lease(r, "b", "k", false, 2, 50, 200)
		}, []string{"overlap"}, "", 0},
		{"shared with permit", func(r *Recorder) {
			lease(r, "a", "k", true, 1, 0, 100)
			permit(r, "b", "k", 3, 2, 50, 200)
		}, []string{"overlap"}, "", 0},
		{"across a state loss", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 100)
			permit(r, "b", "k", 2, 2, 10, 200)
			r.faults = append(r.faults, &Fault{Kind: "state-loss", Start: ms2s(20), End: ms2s(20), StateLoss: true})
			permit(r, "c", "k", 2, 3, 50, 200)
		}, nil, "over-limit across a state loss", 1},
		{"too many after a state loss", func(r *Recorder) {
			permit(r, "a", "k", 2, 1, 0, 100)
			r.faults = append(r.faults, &Fault{Kind: "state-loss", Start: ms2s(20), End: ms2s(20), StateLoss: true})
			permit(r, "b", "k", 2, 2, 30, 200)
			permit(r, "c", "k", 2, 3, 40, 200)
			permit(r, "d", "k", 2, 4, 50, 200)
		}, []string{"over-limit"}, "", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTestRecorder(t)
			c.build(r)
			r.Final()
			if got := kinds(r); strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("violations %v, want %v: %v", got, c.want, r.Violations())
			}
			if c.excuse != "" && r.Excused()[c.excuse] == 0 {
				t.Errorf("nothing excused as %q: %v", c.excuse, r.Excused())
			}
			if got := r.Stats().PermitsFull; got != c.full {
				t.Errorf("%d permits filled their semaphore, want %d", got, c.full)
			}
		})
	}
}

// TestPermitTokenOrder: permits of a key may be granted in any order, as
// shared leases may; against the leases they exclude, tokens increase.
func TestPermitTokenOrder(t *testing.T) {
	r := newTestRecorder(t)
	lease(r, "a", "k", false, 5, 0, 10)
	permit(r, "b", "k", 2, 4, 20, 30) // below a's
	permit(r, "c", "k", 2, 8, 40, 100)
	permit(r, "d", "k", 2, 7, 41, 100)    // permit after permit: any order
	lease(r, "e", "k", true, 8, 200, 210) // shared after the permits: not above c's
	permit(r, "f", "k", 2, 9, 300, 310)   // above e's
	lease(r, "g", "k", true, 10, 301, 302)
	permit(r, "h", "k", 2, 10, 400, 410) // not above g's (shared)
	lease(r, "i", "k", false, 11, 500, 510)
	r.Final()
	var ids []string
	for _, v := range r.Violations() {
		if v.Kind != "token-order" {
			continue
		}
		ids = append(ids, v.Lease)
	}
	if strings.Join(ids, ",") != "b,e,h" {
		t.Errorf("token-order violations of %v, want b, e and h: %v", ids, r.Violations())
	}
}

func TestPermitLimits(t *testing.T) {
	seen := map[int]bool{}
	for i := range 4 {
		n := permitLimit(fmt.Sprintf("hot/%d", i))
		if n < 2 || n > 3 {
			t.Errorf("permitLimit(hot/%d) = %d, want 2 or 3", i, n)
		}
		seen[n] = true
	}
	if !seen[2] || !seen[3] {
		t.Errorf("the hot keys' limits are not both 2 and 3: %v", seen)
	}
}

func TestTokenOrderLateReport(t *testing.T) {
	r := newTestRecorder(t)
	lease(r, "a", "k", false, 1, 0, 10)
	lease(r, "c", "k", false, 3, 40, 50)
	r.Check(ms2s(100))
	lease(r, "b", "k", false, 5, 20, 30) // reported late, granted between a and c
	r.Final()
	if got := kinds(r); len(got) != 1 || r.Violations()[0].Lease != "c" {
		t.Errorf("violations %v, want one token-order of c", r.Violations())
	}
}

func TestFencedWrites(t *testing.T) {
	r := newTestRecorder(t)
	if !r.Write("k", "a", ms2s(0), 1) || !r.Write("k", "b", ms2s(10), 2) {
		t.Fatal("fresh writes refused")
	}
	if r.Write("k", "a", ms2s(0), 1) {
		t.Error("stale write with a lower token accepted")
	}
	if st := r.Stats(); st.StaleRejected != 1 {
		t.Errorf("stale refused %d, want 1", st.StaleRejected)
	}
	if len(r.Violations()) != 0 {
		t.Errorf("violations %v", r.Violations())
	}
	// A broken token: the older grant's write is accepted.
	r.Write("j", "c", ms2s(20), 0)
	r.Write("j", "d", ms2s(30), 0)
	r.Write("j", "c", ms2s(20), 0)
	if got := kinds(r); len(got) != 1 || got[0] != "stale-write" {
		t.Errorf("violations %v, want one stale-write", got)
	}
	// The newest grant refused: an older grant had a higher token.
	r.Write("i", "e", ms2s(40), 9)
	r.Write("i", "f", ms2s(50), 8)
	if got := kinds(r); len(got) != 2 || got[1] != "token-order" {
		t.Errorf("violations %v, want a token-order", got)
	}
}

// TestWriteAfterSetAcrossStateLoss: a set's member, its call straddling a
// restart without persistence, is recorded as granted at the call's
// return, after a lease its key granted after the restart; that lease's
// write after the member's is excused (the member may well be the older
// grant), and the same writes with no loss stay a violation.
func TestWriteAfterSetAcrossStateLoss(t *testing.T) {
	for _, lost := range []bool{true, false} {
		r := newTestRecorder(t)
		if lost {
			r.faults = append(r.faults, &Fault{Kind: "restart", Start: ms2s(15), End: ms2s(16), StateLoss: true})
		}
		r.Grant(LeaseRec{ID: "m", Key: "k", Set: true, Holder: "L", Proc: parentProc, Op: "lockmany", Token: 5,
			Asked: ms2s(10), Granted: ms2s(40), LastHeld: ms2s(40), Deadline: ms2s(2000), UnlockAt: Never, DoneAt: Never})
		lease(r, "n", "k", false, 7, 30, 35)
		r.Write("k", "m", ms2s(40), 5)
		r.Write("k", "n", ms2s(30), 7)
		got := kinds(r)
		if lost && (slices.Contains(got, "stale-write") || r.Excused()["write across a state loss"] != 1) {
			t.Errorf("with a state loss: violations %v, excused %v", got, r.Excused())
		}
		if !lost && !slices.Contains(got, "stale-write") {
			t.Errorf("without a state loss: violations %v, want a stale-write", got)
		}
	}
}

func TestFrozenExcused(t *testing.T) {
	r := newTestRecorder(t)
	r.faults = append(r.faults, &Fault{Kind: "freeze", Start: ms2s(1000), End: ms2s(3000), Frozen: "C1.1"})
	r.Violate(Violation{Kind: "done-late", At: ms2s(3500), From: ms2s(2000), Proc: "C1.1"}) // woke 0.5s before
	r.Violate(Violation{Kind: "done-late", At: ms2s(5000), From: ms2s(4800), Proc: "C1.1"}) // long after
	r.Violate(Violation{Kind: "done-late", At: ms2s(3500), From: ms2s(2000), Proc: parentProc})
	r.Violate(Violation{Kind: "overlap", At: ms2s(2000), From: ms2s(2000), Proc: "C1.1"}) // never excused
	r.Final()
	if got := kinds(r); strings.Join(got, ",") != "overlap,done-late,done-late" {
		t.Errorf("violations %v", got)
	}
	if r.Excused()["frozen done-late"] != 1 {
		t.Errorf("excused %v", r.Excused())
	}
}

func TestStarvedExcused(t *testing.T) {
	r := newTestRecorder(t)
	r.Starved(parentProc, ms2s(1000), ms2s(1400))
	late := func(from, at int) Violation {
		return Violation{Kind: "late-return", From: ms2s(from), At: ms2s(at), Proc: parentProc, Over: time.Duration(at-from-100) * time.Millisecond}
	}
	r.Violate(late(900, 1500))  // 500ms over a 100ms deadline, 400ms of it starved: excused
	r.Violate(late(900, 2500))  // 1.5s over, 400ms starved: not excused
	r.Violate(late(2000, 2400)) // 300ms over, not starved then: not excused
	r.Final()
	if got := kinds(r); len(got) != 2 || r.Excused()["starved late-return"] != 1 {
		t.Errorf("violations %v, excused %v", r.Violations(), r.Excused())
	}
}

// TestObserve checks the holder's side on the memory driver: a lease is
// held until Unlock (TestObserveLateDone: a late Done is flagged).
func TestObserve(t *testing.T) {
	r := newTestRecorder(t)
	clk := r.clk
	lk := memory.New(memory.NewStore(), nil)
	defer lk.Close()
	ls, err := lk.Lock(context.Background(), "k", lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	in := &lockerInst{lk: lk, name: "L"}
	l := &liveLease{id: "a", key: "k", proc: parentProc, lease: ls, inst: in}
	r.Grant(LeaseRec{ID: "a", Key: "k", Granted: clk.Now(), LastHeld: clk.Now(), UnlockAt: Never, DoneAt: Never})
	if !l.observe(clk, r) {
		t.Fatal("a lease just granted is not held")
	}
	l.markUnlocking(clk, r, "unlock")
	if l.observe(clk, r) {
		t.Error("a lease being unlocked is held")
	}
	ls.Unlock(context.Background())
	l.observe(clk, r)
	if rec := r.Leases()[0]; rec.DoneAt == Never || rec.UnlockAt == Never || rec.LastHeld >= rec.UnlockAt {
		t.Errorf("record %v", &rec)
	}
	if len(r.Violations()) != 0 {
		t.Errorf("violations %v", r.Violations())
	}
}

// TestObserveLateDone: a lease whose Done is still open DoneSlack past its
// deadline is flagged done-late by its observation (once), as lost.
func TestObserveLateDone(t *testing.T) {
	r := newTestRecorder(t)
	clk := r.clk
	lk := memory.New(memory.NewStore(), nil)
	defer lk.Close()
	ls, err := lk.Lock(context.Background(), "k", lock.WithTTL(50*time.Millisecond), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	// The lock ends the lease at its deadline; this view of it sees Done
	// closed a second later.
	view := &brokenLease{Lease: ls, late: delayedDone(ls, time.Second, isLost)}
	in := &lockerInst{lk: lk, name: "L"}
	l := &liveLease{id: "a", key: "k", proc: parentProc, lease: view, inst: in}
	r.Grant(LeaseRec{ID: "a", Key: "k", Granted: clk.Now(), LastHeld: clk.Now(), UnlockAt: Never, DoneAt: Never})
	if !l.observe(clk, r) {
		t.Fatal("a lease just granted is not held")
	}
	time.Sleep(time.Until(ls.Deadline()) + 2*DoneSlack)
	if !closed(ls.Done()) || closed(view.Done()) {
		t.Fatalf("the lease's Done closed %v, the view's %v: want the lease's only", closed(ls.Done()), closed(view.Done()))
	}
	for i := range 2 { // observed twice: the second look must not revive it
		if l.observe(clk, r) {
			t.Errorf("look %d: a lease past its deadline is held", i+1)
		}
	}
	r.Final()
	if got := kinds(r); strings.Join(got, ",") != "done-late" {
		t.Errorf("violations %v, want one done-late", r.Violations())
	}
}
