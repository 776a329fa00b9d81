package rediswatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

const (
	// churnFor is how long each churn test runs its contenders.
	churnFor = 2500 * time.Millisecond
	// hold is how long a contender holds each grant, so that grants
	// overlap (the semaphore is full) and the limit is checked.
	hold = time.Millisecond
)

// churnResult is what churn saw.
type churnResult struct {
	grants, unlockErrs, refreshes, refreshErrs int64
	maxHolders                                 int64 // the most grants held at once
	stats                                      Stats // summed over the Lockers
	firstErr                                   error
}

// churn runs n contenders for churnFor, each with its own Locker and
// client: take a grant with take (of one key), hold it for hold, Unlock it,
// and again. With refresher, one more Locker holds a grant taken by take
// for the whole run and refreshes it in a loop. It counts the grants, the
// Unlock and Refresh errors, and the most grants held at once.
func churn(t *testing.T, n int, refresher bool, take func(ctx context.Context, l *lock.Locker) (*lock.Lease, error)) churnResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), churnFor)
	defer cancel()
	addr := standalone(t).Options().Addr
	var (
		res     churnResult
		holders atomic.Int64
		mu      sync.Mutex
		wg      sync.WaitGroup
		lockers []*lock.Locker
	)
	fail := func(err error) {
		mu.Lock()
		if res.firstErr == nil {
			res.firstErr = err
		}
		mu.Unlock()
	}
	held := func() {
		h := holders.Add(1)
		mu.Lock()
		res.maxHolders = max(res.maxHolders, h)
		mu.Unlock()
	}
	newLocker := func() *lock.Locker {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { rdb.Close() })
		l, _ := newTestLocker(t, rdb, nil)
		lockers = append(lockers, l)
		return l
	}
	if refresher {
		l := newLocker()
		lease, err := take(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		held()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := lease.Refresh(context.WithoutCancel(ctx), 10*time.Second)
				atomic.AddInt64(&res.refreshes, 1)
				if err != nil {
					atomic.AddInt64(&res.refreshErrs, 1)
					fail(fmt.Errorf("Refresh: %w", err))
				}
			}
			holders.Add(-1)
			if err := lease.Unlock(context.WithoutCancel(ctx)); err != nil {
				atomic.AddInt64(&res.unlockErrs, 1)
				fail(fmt.Errorf("Unlock: %w", err))
			}
		}()
	}
	for range n {
		l := newLocker()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lease, err := take(ctx, l)
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("grant: %w", err))
					}
					return
				}
				held()
				atomic.AddInt64(&res.grants, 1)
				time.Sleep(hold)
				holders.Add(-1)
				if err := lease.Unlock(context.WithoutCancel(ctx)); err != nil {
					atomic.AddInt64(&res.unlockErrs, 1)
					fail(fmt.Errorf("Unlock: %w", err))
				}
			}
		}()
	}
	wg.Wait()
	for _, l := range lockers {
		s := stats(t, l)
		res.stats.ReleaseAborts += s.ReleaseAborts
		res.stats.RefreshAborts += s.RefreshAborts
		res.stats.GaveUp += s.GaveUp
		res.stats.GrantAborts += s.GrantAborts
	}
	return res
}

// Permits and shares churned on one key by many contenders (the bench's
// semaphore scenario) are returned without an error: a release of a permit
// or a share does not abort when other grants of the key come and go, so
// none gives up with ErrConflict. The limit holds throughout.
func TestMemberChurn(t *testing.T) {
	t.Run("permits", func(t *testing.T) {
		k := testKey(t)
		r := churn(t, 24, false, func(ctx context.Context, l *lock.Locker) (*lock.Lease, error) {
			return l.Acquire(ctx, k, 4)
		})
		checkChurn(t, "24 contenders for 4 permits", r, 4)
	})
	t.Run("shares", func(t *testing.T) {
		k := testKey(t)
		r := churn(t, 16, false, func(ctx context.Context, l *lock.Locker) (*lock.Lease, error) {
			return l.RLock(ctx, k)
		})
		checkChurn(t, "16 readers", r, 0)
	})
}

// A permit or a share renewed in a loop while others churn on the key is
// renewed every time: a renewal does not abort when other grants of the
// key come and go, so none gives up with ErrConflict (lock would count it a
// failed renewal).
func TestMemberRefreshChurn(t *testing.T) {
	t.Run("permits", func(t *testing.T) {
		k := testKey(t)
		r := churn(t, 16, true, func(ctx context.Context, l *lock.Locker) (*lock.Lease, error) {
			return l.Acquire(ctx, k, 4)
		})
		checkChurn(t, "16 contenders for 4 permits, one refreshing", r, 4)
	})
	t.Run("shares", func(t *testing.T) {
		k := testKey(t)
		r := churn(t, 16, true, func(ctx context.Context, l *lock.Locker) (*lock.Lease, error) {
			return l.RLock(ctx, k)
		})
		checkChurn(t, "16 readers, one refreshing", r, 0)
	})
}

// checkChurn fails t unless churn's contenders, limit of whom (0: any
// number) may hold the key at once, made grants, and no Unlock nor Refresh
// failed.
func checkChurn(t *testing.T, what string, r churnResult, limit int64) {
	t.Helper()
	t.Logf("%s: %d grants, %d refreshes, at most %d held at once; stats %+v", what, r.grants, r.refreshes, r.maxHolders, r.stats)
	if r.grants < 100 {
		t.Errorf("%s: only %d grants in %v", what, r.grants, churnFor)
	}
	if r.unlockErrs != 0 || r.refreshErrs != 0 || r.stats.GaveUp != 0 {
		t.Errorf("%s: %d Unlock errors, %d Refresh errors (of %d), %d calls gave up; first: %v",
			what, r.unlockErrs, r.refreshErrs, r.refreshes, r.stats.GaveUp, r.firstErr)
	} else if r.firstErr != nil {
		t.Errorf("%s: %v", what, r.firstErr)
	}
	if limit > 0 && r.maxHolders > limit {
		t.Errorf("%s: %d permits held at once, limit %d", what, r.maxHolders, limit)
	}
}
