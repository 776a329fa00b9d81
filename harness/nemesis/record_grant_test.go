package nemesis

import (
	"slices"
	"strings"
	"testing"
)

// grantLease records a lease of key, of the grant owned by grant (limit:
// a permit's), granted at g (ms) and proven held until h; an ID ending in
// "'" is a Resume of the lease of the ID without it.
func grantLease(r *Recorder, id, key, grant string, limit int, token uint64, g, h int) {
	op, resumes := "lock", ""
	if strings.HasSuffix(id, "'") {
		op, resumes = "resume", strings.TrimSuffix(id, "'")
	}
	r.Grant(LeaseRec{ID: id, Key: key, Limit: limit, Grant: grant, Holder: "L", Proc: parentProc, Op: op, Token: token, Resumes: resumes,
		Granted: ms2s(g), LastHeld: ms2s(g), Deadline: ms2s(h + 1000), UnlockAt: Never, DoneAt: Never})
	r.Held(id, ms2s(h), ms2s(h+1000))
}

// Two Leases of one grant (a live lease and one resumed from its handle)
// are one holder: they neither overlap nor count as two permits; leases
// of other grants, or of another token, still do.
func TestSameGrant(t *testing.T) {
	cases := []struct {
		name  string
		build func(r *Recorder)
		want  []string
	}{
		{"a lease and its resumed twin", func(r *Recorder) {
			grantLease(r, "a", "k", "o1", 0, 1, 0, 1000)
			grantLease(r, "a'", "k", "o1", 0, 1, 300, 600)
		}, nil},
		{"and a third of another grant", func(r *Recorder) {
			grantLease(r, "a", "k", "o1", 0, 1, 0, 1000)
			grantLease(r, "a'", "k", "o1", 0, 1, 300, 600)
			grantLease(r, "c", "k", "o2", 0, 2, 500, 700)
		}, []string{"overlap", "overlap"}},
		{"same owner, another token", func(r *Recorder) {
			grantLease(r, "a", "k", "o1", 0, 1, 0, 1000)
			grantLease(r, "b", "k", "o1", 0, 2, 300, 600)
		}, []string{"overlap"}},
		{"no grant recorded", func(r *Recorder) {
			grantLease(r, "a", "k", "", 0, 1, 0, 1000)
			grantLease(r, "a'", "k", "", 0, 1, 300, 600)
		}, []string{"overlap"}},
		{"a permit and its twin fill a semaphore of 2 once", func(r *Recorder) {
			grantLease(r, "a", "k", "o1", 2, 1, 0, 1000)
			grantLease(r, "a'", "k", "o1", 2, 1, 300, 600)
			grantLease(r, "c", "k", "o2", 2, 2, 400, 700)
		}, nil},
		{"three grants in a semaphore of 2", func(r *Recorder) {
			grantLease(r, "a", "k", "o1", 2, 1, 0, 1000)
			grantLease(r, "b", "k", "o3", 2, 3, 300, 600)
			grantLease(r, "c", "k", "o2", 2, 2, 400, 700)
		}, []string{"over-limit"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTestRecorder(t)
			c.build(r)
			r.Final()
			if got := kinds(r); !slices.Equal(got, c.want) {
				t.Errorf("violations %v, want %v", got, c.want)
			}
		})
	}
}

// A lease whose reply came late was granted before it was seen: an
// overlap with a lease granted after a state loss that came between its
// call and its first observation is excused, as across any state loss.
func TestGrantAskedBeforeStateLoss(t *testing.T) {
	for _, asked := range []int{0, 50} {
		r := newTestRecorder(t)
		r.faults = append(r.faults, &Fault{Kind: "server-restart-volatile", Start: ms2s(100), End: ms2s(150), StateLoss: true})
		r.Grant(LeaseRec{ID: "a", Key: "k", Holder: "L", Proc: parentProc, Op: "lock", Token: 5, Asked: ms2s(asked),
			Granted: ms2s(200), LastHeld: ms2s(200), Deadline: ms2s(2000), UnlockAt: Never, DoneAt: Never})
		r.Held("a", ms2s(500), ms2s(2000))
		lease(r, "b", "k", false, 1, 300, 400)
		r.Final()
		got := slices.DeleteFunc(kinds(r), func(k string) bool { return k == "token-order" })
		if want := asked == 0; (len(got) > 0) != want {
			t.Errorf("call begun at %dms, granted at 200ms, state lost at 100ms: violations %v", asked, got)
		}
	}
}
