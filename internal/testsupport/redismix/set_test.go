package redismix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Sets of both drivers (each one-step: redisnx's script, rediswatch's
// transaction, or key by key) and single-key Locks of both drivers on the
// same keys: no key has two holders at once, and each key's tokens rise
// in the order its holders came in, whichever driver or path granted
// them. Both one-step paths must have granted sets during the run.
func TestMixedSets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	base := fmt.Sprintf("redismix/sets/%d", time.Now().UnixNano())
	keys := []string{base + "/a", base + "/b", base + "/c", base + "/d"}
	var (
		mu     sync.Mutex
		holder = map[string]string{}
		last   = map[string]uint64{}
		atomic = map[string]int{}
	)
	enter := func(who string, ls []*lock.Lease) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range ls {
			if h, ok := holder[l.Key()]; ok {
				t.Errorf("%s granted %s while %s holds it", who, l.Key(), h)
			}
			if l.Token() <= last[l.Key()] {
				t.Errorf("%s granted %s with token %d after %d", who, l.Key(), l.Token(), last[l.Key()])
			}
			holder[l.Key()], last[l.Key()] = who, l.Token()
		}
	}
	leave := func(ls []*lock.Lease) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range ls {
			delete(holder, l.Key())
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		lk, name := watch, "rediswatch"
		if w%2 == 1 {
			lk, name = nx, "redisnx"
		}
		who := fmt.Sprintf("%s worker %d", name, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 30 {
				if ctx.Err() != nil {
					return
				}
				var ls []*lock.Lease
				var release func()
				if w < 4 { // single keys, both drivers
					l, err := lk.Lock(ctx, keys[rng.IntN(len(keys))])
					if err != nil {
						t.Errorf("%s: Lock: %v", who, err)
						return
					}
					ls, release = []*lock.Lease{l}, func() { l.Unlock(ctx) }
				} else { // sets of 2 to 4 keys, both drivers, tries and waits
					ks := keys[:0:0]
					for _, i := range rng.Perm(len(keys))[:2+rng.IntN(3)] {
						ks = append(ks, keys[i])
					}
					take := lk.LockMany
					if w >= 6 {
						take = lk.TryLockMany
					}
					m, err := take(ctx, ks)
					if err != nil {
						if w < 6 || ctx.Err() != nil {
							t.Errorf("%s: LockMany: %v", who, err)
							return
						}
						time.Sleep(time.Millisecond)
						continue
					}
					if m.Atomic() {
						mu.Lock()
						atomic[name]++
						mu.Unlock()
					}
					ls, release = m.Leases(), func() { m.Unlock(ctx) }
				}
				enter(who, ls)
				time.Sleep(time.Millisecond)
				leave(ls)
				release()
			}
		}()
	}
	wg.Wait()
	t.Logf("sets granted in one step: %v", atomic)
	for _, name := range []string{"redisnx", "rediswatch"} {
		if atomic[name] == 0 {
			t.Errorf("no %s set was granted in one step", name)
		}
	}
}
