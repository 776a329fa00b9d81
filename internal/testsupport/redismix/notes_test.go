package redismix

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
)

// Both drivers keep grant notes in P{K}:n: each driver's Inspect shows the
// notes of the other's grants (an exclusive grant, readers side by side, a
// grant handed over by the other driver's release), and a release by
// either deletes its own field, leaving no hash.
func TestMixedNotes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	rdb := rawClient(t)
	k := "redismix/notes/" + randHex(8)
	notes := func(what string, want ...string) {
		t.Helper()
		for i, l := range []*lock.Locker{nx, watch} {
			st := mustInspect(t, ctx, l, k)
			var got []string
			for _, h := range st.Holders {
				got = append(got, h.Note)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s reads notes %q, want %q", what, []string{"redisnx", "rediswatch"}[i], got, want)
			}
		}
	}
	for _, pair := range [][2]*lock.Locker{{nx, watch}, {watch, nx}} {
		a, b := pair[0], pair[1]
		la, err := a.TryLock(ctx, k, lock.WithNote("a"))
		if err != nil {
			t.Fatal(err)
		}
		notes("an exclusive grant", "a")
		got := make(chan error, 1)
		var lb *lock.Lease
		go func() {
			var err error
			lb, err = b.Lock(ctx, k, lock.WithNote("b"))
			got <- err
		}()
		time.Sleep(200 * time.Millisecond) // b queues
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		notes("a waiter's grant after the other driver's release", "b")
		if err := lb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r1, err := a.TryRLock(ctx, k, lock.WithNote("r1"))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := b.TryRLock(ctx, k, lock.WithNote("r2"))
		if err != nil {
			t.Fatal(err)
		}
		notes("two readers", "r1", "r2")
		r1.Unlock(ctx)
		r2.Unlock(ctx)
		if n := rdb.Exists(ctx, redisx.LockKey(redisx.DefaultPrefix, k)+redisx.NotesSuffix).Val(); n != 0 {
			t.Errorf("the notes hash outlives the grants")
		}
	}
}
