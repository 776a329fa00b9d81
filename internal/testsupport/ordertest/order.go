// Package ordertest measures the order in which a queued key's waiters are
// granted it, for the drivers' own tests of their queues (the conformance
// suite, driver/drivertest, checks arrival order through Semaphore/FIFO).
package ordertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// GrantOrder is for drivers' own tests of their queues: a holder keeps key
// k while n waiters, each with the Locker newLocker returns, start Lock
// one after the other (each once queued reports it queued, or 50ms apart
// when queued is nil), then releases. It returns the order in which the
// waiters were granted the key (each unlocks at once); IsFIFO tells
// whether that is their arrival order.
func GrantOrder(t *testing.T, newLocker func() *lock.Locker, k string, n int, queued func() int64) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := newLocker().TryLock(ctx, k)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		l := newLocker()
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Lock(ctx, k)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := lease.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: Unlock: %v", i, err)
			}
		}()
		if queued == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for deadline := time.Now().Add(5 * time.Second); queued() != int64(i+1); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d not queued: %d in the queue", i, queued())
			}
		}
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	wg.Wait()
	return order
}

// IsFIFO reports whether order is 0, 1, 2, ...: arrival order.
func IsFIFO(order []int) bool {
	for i, w := range order {
		if w != i {
			return false
		}
	}
	return true
}
