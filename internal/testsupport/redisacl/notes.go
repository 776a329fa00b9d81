package redisacl

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// ExerciseNotes checks grant notes (lock.WithNote) in every mode through
// a and b, two Lockers of one Redis driver (of a user with the driver's
// documented ACL rules, say), as b's Inspect shows them: shared leases'
// and permits' notes side by side; a named owner's re-entry keeping its
// first hold's note, until the last hold goes; a note outliving its
// grant's first TTL by renewal, and by a resumed Lease's renewal; and no
// notes hash left once every grant is released (admin lists the keys
// matching pattern, the notes hashes of the driver's prefix).
func ExerciseNotes(t *testing.T, a, b *lock.Locker, admin redis.UniversalClient, pattern string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "notes-" + randHex(8)
	check := func(step string, key string, want ...string) {
		t.Helper()
		st, err := b.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("%s: Inspect: %v", step, err)
		}
		var got []string
		for _, h := range st.Holders {
			got = append(got, h.Note)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the holders' notes are %q, want %q (holders %+v)", step, got, want, st.Holders)
		}
	}
	must := func(l *lock.Lease, err error) *lock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	unlock := func(ls ...*lock.Lease) {
		t.Helper()
		for _, l := range ls {
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		}
	}

	r1 := must(a.RLock(ctx, k+"r", lock.WithNote("reader 1")))
	r2 := must(b.TryRLock(ctx, k+"r", lock.WithNote("reader 2")))
	r3 := must(a.RLock(ctx, k+"r"))
	check("shares", k+"r", "reader 1", "reader 2", "")
	unlock(r1)
	check("shares, one left", k+"r", "reader 2", "")
	unlock(r2, r3)

	p1 := must(a.Acquire(ctx, k+"p", 2, lock.WithNote("permit 1")))
	p2 := must(b.TryAcquire(ctx, k+"p", 2, lock.WithNote("permit 2")))
	check("permits", k+"p", "permit 1", "permit 2")
	unlock(p1, p2)

	o1 := must(a.Lock(ctx, k+"o", lock.WithOwner("job-1"), lock.WithNote("first hold")))
	o2 := must(b.TryLock(ctx, k+"o", lock.WithOwner("job-1"), lock.WithNote("second hold")))
	check("re-entry", k+"o", "first hold")
	unlock(o1)
	check("re-entry, first hold released", k+"o", "first hold")
	unlock(o2)
	check("re-entry, both released", k+"o")

	// A second's TTL, passed three times over: long enough that a loaded
	// machine's late renewal does not lose the grant itself (which would
	// leave no note to check), short enough to need renewals.
	short := time.Second
	renewed := must(a.Lock(ctx, k+"x", lock.WithTTL(short), lock.WithNote("renewed")))
	time.Sleep(3 * short)
	if err := renewed.Err(); err != nil {
		t.Fatalf("the grant itself was lost before its note could be checked: %v", err)
	}
	check("renewed past its first TTL", k+"x", "renewed")
	handle, err := renewed.Detach()
	if err != nil {
		t.Fatal(err)
	}
	resumed := must(b.Resume(ctx, handle, lock.WithTTL(short)))
	time.Sleep(3 * short)
	if err := resumed.Err(); err != nil {
		t.Fatalf("the resumed grant itself was lost before its note could be checked: %v", err)
	}
	check("resumed and renewed past its TTL", k+"x", "renewed")
	unlock(resumed)

	// Other tests may share the server: only this run's keys count.
	all, err := admin.Keys(ctx, pattern).Result()
	var left []string
	for _, name := range all {
		if strings.Contains(name, k) {
			left = append(left, name)
		}
	}
	if err != nil || len(left) > 0 {
		t.Fatalf("notes hashes left after every release: %q (%v)", left, err)
	}
}
