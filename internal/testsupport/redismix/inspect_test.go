package redismix

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Both drivers read the grants of their shared layout alike, whichever
// driver made them: a reader of each, permits of each, a named owner's
// holds through both; each lists the waiters of its own queue only.
func TestMixedInspect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	k := "redismix/inspect/" + randHex(8)
	same := func(what string) *lock.KeyState {
		t.Helper()
		a, b := mustInspect(t, ctx, nx, k), mustInspect(t, ctx, watch, k)
		owners := func(st *lock.KeyState) []string {
			var o []string
			for _, h := range st.Holders {
				o = append(o, h.Owner+" "+h.Mode.String())
			}
			slices.Sort(o)
			return o
		}
		if !slices.Equal(owners(a), owners(b)) {
			t.Errorf("%s: redisnx reads holders %v, rediswatch %v", what, owners(a), owners(b))
		}
		return a
	}
	owner := func(l *lock.Lease) string { return l.Handle()[len("dlock1.x."):][:32] }

	r1, err := nx.TryRLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := watch.TryRLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if st := same("two readers"); len(st.Holders) != 2 || !slices.ContainsFunc(st.Holders, func(h lock.Holder) bool { return h.Owner == owner(r2) }) {
		t.Errorf("readers of both drivers: %+v", st.Holders)
	}
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	p1, err := nx.TryAcquire(ctx, k, 2)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := watch.TryAcquire(ctx, k, 2)
	if err != nil {
		t.Fatal(err)
	}
	if st := same("two permits"); len(st.Holders) != 2 || st.Holders[0].Limit != 2 || st.Holders[1].Limit != 2 {
		t.Errorf("permits of both drivers: %+v", st.Holders)
	}
	// A waiter of each driver: each lists its own.
	waiters := make(chan *lock.Lease, 2)
	for _, l := range []*lock.Locker{nx, watch} {
		go func() {
			w, err := l.Lock(ctx, k)
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			waiters <- w
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a, b := mustInspect(t, ctx, nx, k), mustInspect(t, ctx, watch, k)
		if len(a.Waiters) == 1 && len(b.Waiters) == 1 && a.Waiters[0].Owner != b.Waiters[0].Owner {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters: redisnx lists %+v, rediswatch %+v; want one each, its own", a.Waiters, b.Waiters)
		}
	}
	p1.Unlock(ctx)
	p2.Unlock(ctx)
	for range 2 {
		if w := <-waiters; w != nil {
			w.Unlock(ctx)
		}
	}

	h1, err := nx.TryLock(ctx, k, lock.WithOwner("mixed-inspect"))
	if err != nil {
		t.Fatal(err)
	}
	h2, err := watch.TryLock(ctx, k, lock.WithOwner("mixed-inspect"))
	if err != nil {
		t.Fatal(err)
	}
	if st := same("a named owner's two holds"); len(st.Holders) != 1 || st.Holders[0].Holds != 2 || st.Holders[0].Token != h1.Token() || st.Holders[0].Owner != lock.Owner("mixed-inspect") {
		t.Errorf("holds of both drivers: %+v", st.Holders)
	}
	h1.Unlock(ctx)
	h2.Unlock(ctx)
	if st := same("a free key"); st.Held() {
		t.Errorf("a free key: %+v", st.Holders)
	}
}
