package rediswatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// touchKey returns a beforeExec hook that changes the watched lock key
// (PEXPIRE keeps its value, so the grant stays the caller's) the first n
// times it runs, and counts its runs.
func touchKey(t *testing.T, rdb redis.UniversalClient, n int32, runs *atomic.Int32) *func(op, lk string) {
	f := func(op, lk string) {
		if runs.Add(1) <= n {
			if err := rdb.PExpire(context.Background(), lk, time.Minute).Err(); err != nil {
				t.Errorf("PEXPIRE: %v", err)
			}
		}
	}
	return &f
}

// A key that changes between WATCH and EXEC on every attempt makes Release
// and Refresh give up after MaxAttempts transactions with ErrConflict (not
// ErrNotHeld, the grant is still there) instead of spinning. The lease
// stays usable after a Refresh gives up; an Unlock that gives up ends the
// lease, and lock retries the release in the background until it works.
func TestConflictBoundedRetries(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l, d := newTestLocker(t, rdb, nil)
		other, _ := newTestLocker(t, rdb, nil)
		lease, err := l.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		var runs atomic.Int32
		d.beforeExec.Store(touchKey(t, rdb, 1<<30, &runs))

		// Longer than the hook's PEXPIRE, so that every attempt has a
		// transaction to run (a refresh never shortens the key).
		err = lease.Refresh(ctx, 2*time.Minute)
		if !errors.Is(err, ErrConflict) || errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Refresh of a key that keeps changing: err = %v, want ErrConflict and not ErrNotHeld", err)
		}
		if got := runs.Load(); got != MaxAttempts {
			t.Errorf("%d transactions reached EXEC, want %d (MaxAttempts)", got, MaxAttempts)
		}
		if s := stats(t, l); s.RefreshAborts != MaxAttempts || s.GaveUp != 1 {
			t.Errorf("Stats = %+v, want %d refresh aborts, 1 given up", s, MaxAttempts)
		}
		if lease.Err() != nil {
			t.Errorf("lease ended by a refresh conflict: %v", lease.Err())
		}
		err = lease.Unlock(ctx)
		if !errors.Is(err, ErrConflict) || errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Unlock of a key that keeps changing: err = %v, want ErrConflict and not ErrNotHeld", err)
		}
		if s := stats(t, l); s.ReleaseAborts < MaxAttempts || s.GaveUp < 2 {
			t.Errorf("Stats = %+v, want at least %d release aborts, 2 given up", s, MaxAttempts)
		}
		if lease.Err() == nil {
			t.Error("an Unlock that gave up left the lease reported held")
		}
		if _, err := other.TryLock(ctx, lease.Key()); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("the grant is gone while every release conflicts: TryLock err = %v", err)
		}
		d.beforeExec.Store(touchKey(t, rdb, 0, &runs))
		deadline := time.Now().Add(3 * time.Second)
		for {
			free, err := other.TryLock(ctx, lease.Key())
			if err == nil {
				free.Unlock(ctx)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("key not released in the background once the conflicts stopped: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}

		// A key that changes twice costs two retries, then works.
		lease, err = l.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		before := stats(t, l)
		runs.Store(0)
		d.beforeExec.Store(touchKey(t, rdb, 2, &runs))
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after two conflicts: %v", err)
		}
		if s := stats(t, l); s.ReleaseAborts-before.ReleaseAborts != 2 || s.GaveUp != before.GaveUp {
			t.Errorf("Stats = %+v after %+v, want 2 more release aborts, none given up", s, before)
		}
		if lease, err := other.TryLock(ctx, lease.Key()); err != nil {
			t.Errorf("key not free after Unlock: %v", err)
		} else {
			lease.Unlock(ctx)
		}
	})
}

// A grant whose key or counter changes between WATCH and EXEC is a failed
// attempt: TryLock reports ErrNotAcquired and leaves nothing behind; Lock
// retries and gets the key.
func TestConflictOnGrant(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		l, d := newTestLocker(t, rdb, nil)
		k := testKey(t)
		var runs atomic.Int32
		touchCounter := func(op, lk string) {
			if runs.Add(1) == 1 {
				rdb.Incr(context.Background(), lk+":fence")
			}
		}
		d.beforeExec.Store(&touchCounter)
		if _, err := l.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryLock with the counter changed under it: err = %v, want ErrNotAcquired", err)
		}
		if n, err := rdb.Exists(ctx, DefaultPrefix+"{"+k+"}").Result(); err != nil || n != 0 {
			t.Errorf("an aborted grant left the lock key (exists=%d, err=%v)", n, err)
		}
		if s := stats(t, l); s.GrantAborts != 1 {
			t.Errorf("GrantAborts = %d, want 1", s.GrantAborts)
		}
		runs.Store(0)
		lease, err := l.Lock(ctx, k)
		if err != nil {
			t.Fatalf("Lock after one aborted attempt: %v", err)
		}
		lease.Unlock(ctx)
		if s := stats(t, l); s.GrantAborts != 2 {
			t.Errorf("GrantAborts = %d, want 2", s.GrantAborts)
		}
	})
}
