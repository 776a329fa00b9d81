// Package settest runs overlapping multi-key sets against a driver, for
// the drivers' tests: no two holders of a key at once, no deadlock, no
// starvation. It is test machinery only.
package settest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Stress runs eight workers on the Lockers open makes (one each), over
// five keys: one takes single keys with Lock, one tries sets with
// TryLockMany, the others take sets with LockMany, each set of 1 to 4
// keys in a random order, 40 rounds each.
//
// Overlapping sets in every order, with single-key lockers mixed in: no
// two holders of a key at once, and every worker finishes its rounds
// (no deadlock, no starvation) well within the bound. It returns how
// many sets were taken in one step (MultiLease.Atomic).
func Stress(t *testing.T, open func() *lock.Locker) (atomicSets int64) {
	keys := []string{"s/a", "s/b", "s/c", "s/d", "s/e"}
	var mu sync.Mutex
	holder := map[string]int{}
	enter := func(w int, ks []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			if h, ok := holder[k]; ok {
				t.Errorf("worker %d granted %s while worker %d holds it", w, k, h)
			}
			holder[k] = w
		}
	}
	leave := func(ks []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			delete(holder, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg      sync.WaitGroup
		oneStep atomic.Int64
	)
	rounds := make([]int, 8)
	for w := range rounds {
		lk := open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer lk.Close()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for rounds[w] < 40 && ctx.Err() == nil {
				n := 1 + rng.IntN(4)
				perm := rng.Perm(len(keys))[:n]
				ks := make([]string, n)
				for i, p := range perm {
					ks[i] = keys[p]
				}
				switch {
				case w == 0: // a single-key locker
					l, err := lk.Lock(ctx, ks[0])
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					enter(w, ks[:1])
					time.Sleep(time.Millisecond)
					leave(ks[:1])
					l.Unlock(ctx)
				case w == 1: // tries
					m, err := lk.TryLockMany(ctx, ks)
					if err != nil {
						if !errors.Is(err, lock.ErrHeld) {
							t.Errorf("worker %d: %v", w, err)
							return
						}
						time.Sleep(time.Millisecond)
						continue
					}
					if m.Atomic() {
						oneStep.Add(1)
					}
					enter(w, ks)
					leave(ks)
					m.Unlock(ctx)
				default:
					m, err := lk.LockMany(ctx, ks)
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					if m.Atomic() {
						oneStep.Add(1)
					}
					enter(w, ks)
					time.Sleep(time.Millisecond)
					leave(ks)
					m.Unlock(ctx)
				}
				rounds[w]++
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Errorf("rounds done in 60s: %v; want 40 each (a deadlock or a starved worker)", rounds)
	}
	return oneStep.Load()
}
