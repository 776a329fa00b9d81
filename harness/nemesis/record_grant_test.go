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
