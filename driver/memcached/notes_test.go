package memcached

import (
	"context"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestNotesNamedOwner: a named owner's grant keeps its first hold's note
// through a re-entry, the first hold's release and a resume, in the
// lock item's value.
func TestNotesNamedOwner(t *testing.T) {
	c := memcache.New(testserver.SharedMemcached(t).Addrs()...)
	a, b := New(c, nil), New(c, nil)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "notes-" + t.Name() + time.Now().Format("150405.000000")
	note := func(step string, want string) {
		t.Helper()
		st, err := b.Inspect(ctx, k)
		if err != nil || len(st.Holders) != 1 || st.Holders[0].Note != want {
			t.Fatalf("%s: holders %+v (%v); want one with note %q", step, st, err, want)
		}
	}
	first, err := a.Lock(ctx, k, lock.WithOwner("job-1"), lock.WithNote("first hold"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.TryLock(ctx, k, lock.WithOwner("job-1"), lock.WithNote("second hold"))
	if err != nil {
		t.Fatal(err)
	}
	note("re-entry", "first hold")
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	note("first hold released", "first hold")
	handle, err := second.Detach()
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := a.Resume(ctx, handle)
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.Refresh(ctx, 0); err != nil {
		t.Fatal(err)
	}
	note("resumed and refreshed", "first hold")
	if err := resumed.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Inspect(ctx, k); err != nil || st.Held() {
		t.Fatalf("after the last hold's release: %+v, %v", st, err)
	}
}

// TestNotesOlderVersions: what a version before notes makes of a noted
// value. Its holds parser was parseHolds as it is (applied to the whole
// value), and it compared the whole value with its owner token: a noted
// grant is neither its own nor holds it can parse, whatever the note
// says (one that looks like holds included).
func TestNotesOlderVersions(t *testing.T) {
	const owner = "0123456789abcdef0123456789abcdef"
	h := holdsValue{first: owner, token: 7, holds: []hold{{owner, 30}}}
	for _, n := range []string{"host:1", "first host:1 ✓", "a:5 b:6", ":0", " "} {
		if _, ok := parseHolds(withNote(h.bytes(), n)); ok {
			t.Errorf("note %q: the older holds parser reads the noted value %q", n, withNote(h.bytes(), n))
		}
		if v := withNote([]byte(owner), n); string(v) == owner {
			t.Errorf("note %q: the noted value is the bare owner token", n)
		}
		v, got := splitNote(withNote(h.bytes(), n))
		if got != n || string(v) != string(h.bytes()) {
			t.Errorf("note %q: split into %q and %q", n, v, got)
		}
	}
}
