package rediswatch

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// abortBound is how long a call may take after its context is cancelled.
const abortBound = 2 * time.Second

// TestLaneAbort: a call whose reply a proxy holds returns once its
// context is cancelled (its lane's connection is closed), and its lost
// reply is cleaned up: the key is free afterwards, long before its TTL.
// With an abort that does not close the connection, each call waits for
// the held reply.
func TestLaneAbort(t *testing.T) {
	admin := standalone(t)
	proxy := redistest.StartHoldingProxy(t, admin.Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	l, d := newTestLocker(t, rdb, &Options{Options: lock.Options{TTL: time.Minute}})
	if !d.Capabilities().ReturnsAtContextEnd {
		t.Fatal("rediswatch over a *redis.Client does not return at its calls' context end")
	}
	free := func(what, k string) {
		t.Helper()
		lk := d.LockKey(k)
		if !eventually(10*time.Second, func() bool { return admin.Exists(context.Background(), lk).Val() == 0 }) {
			t.Fatalf("%s: key still held %v after the aborted call", what, admin.PTTL(context.Background(), lk).Val())
		}
	}
	held := func(t *testing.T, k string) *lock.Lease {
		le, err := l.TryLock(testCtx(t), k)
		if err != nil {
			t.Fatal(err)
		}
		return le
	}
	t.Run("TryLock", func(t *testing.T) {
		k := testKey(t)
		abortHeld(t, proxy, func(ctx context.Context) error { _, err := l.TryLock(ctx, k); return err })
		free("TryLock", k)
	})
	t.Run("Lock", func(t *testing.T) {
		k := testKey(t)
		abortHeld(t, proxy, func(ctx context.Context) error { _, err := l.Lock(ctx, k); return err })
		free("Lock", k)
	})
	t.Run("Unlock", func(t *testing.T) {
		k := testKey(t)
		le := held(t, k)
		abortHeld(t, proxy, le.Unlock)
		free("Unlock", k)
	})
	t.Run("Refresh", func(t *testing.T) {
		k := testKey(t)
		le := held(t, k)
		abortHeld(t, proxy, func(ctx context.Context) error { return le.Refresh(ctx, time.Minute) })
		_ = le.Unlock(testCtx(t))
		free("Refresh", k)
	})
}

// abortHeld runs call with the proxy holding every reply, cancels its
// context after 100ms and fails t unless call returns within abortBound.
func abortHeld(t *testing.T, proxy *redistest.HoldingProxy, call func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proxy.Hold.Store(true)
	defer proxy.Hold.Store(false)
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the call succeeded with its reply held")
		}
	case <-time.After(abortBound):
		proxy.Hold.Store(false)
		err := <-done
		t.Fatalf("the call returned %v only once its reply came, %v after its context was cancelled", err, time.Since(start).Round(time.Millisecond))
	}
}
