package queuetest

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Mixed runs goroutines that Lock, RLock and Acquire (of limit permits)
// key through the lockers, in turn, for d, each holding a few
// milliseconds, and fails t when two holders the rule excludes hold at
// once, or a call waits longer than stuck (a waiter the rule grants that
// is not woken).
func Mixed(t *testing.T, lockers []*lock.Locker, key string, goroutines, limit int, d, stuck time.Duration) {
	t.Helper()
	var (
		mu      sync.Mutex
		x, s, p int
		grants  int
		longest time.Duration
		wg      sync.WaitGroup
	)
	enter := func(kind int) {
		mu.Lock()
		defer mu.Unlock()
		grants++
		switch kind {
		case 0:
			if x+s+p != 0 {
				t.Errorf("writer granted beside %d writers, %d readers, %d permits", x, s, p)
			}
			x++
		case 1:
			if x+p != 0 {
				t.Errorf("reader granted beside %d writers, %d permits", x, p)
			}
			s++
		default:
			if x+s != 0 || p >= limit {
				t.Errorf("permit granted beside %d writers, %d readers, %d permits", x, s, p)
			}
			p++
		}
	}
	leave := func(kind int) {
		mu.Lock()
		defer mu.Unlock()
		switch kind {
		case 0:
			x--
		case 1:
			s--
		default:
			p--
		}
	}
	end := time.Now().Add(d)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := lockers[g%len(lockers)]
			r := rand.New(rand.NewPCG(uint64(g), 40))
			for time.Now().Before(end) && !t.Failed() {
				kind := r.IntN(3)
				ctx, cancel := context.WithTimeout(context.Background(), stuck)
				start := time.Now()
				var le *lock.Lease
				var err error
				switch kind {
				case 0:
					le, err = lk.Lock(ctx, key, lock.WithTTL(time.Minute))
				case 1:
					le, err = lk.RLock(ctx, key, lock.WithTTL(time.Minute))
				default:
					le, err = lk.Acquire(ctx, key, limit, lock.WithTTL(time.Minute))
				}
				cancel()
				waited := time.Since(start)
				mu.Lock()
				longest = max(longest, waited)
				mu.Unlock()
				if err != nil {
					t.Errorf("goroutine %d, kind %d: after %v: %v", g, kind, waited, err)
					return
				}
				enter(kind)
				time.Sleep(time.Duration(r.IntN(5000)) * time.Microsecond)
				leave(kind)
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				if err := le.Unlock(ctx); err != nil {
					t.Errorf("unlock: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants, longest wait %v", grants, longest)
}
