package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// TestMutexInterop: etcd's own recipe, concurrency.Mutex on MutexPrefix,
// and dlock exclude each other both ways, and hand the key over in
// arrival order.
func TestMutexInterop(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	locker := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix, Options: lock.Options{TTL: 2 * time.Second}}, &netCut{})
	raw := rawClient(t, e.Endpoints())
	sess, err := concurrency.NewSession(raw, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	k := "interop/key"
	m := concurrency.NewMutex(sess, MutexPrefix(prefix, k))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The mutex holds: dlock is refused, and waits.
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryLock(ctx, k); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock while a concurrency.Mutex holds the key: %v, want ErrHeld", err)
	}
	for _, rl := range []func(context.Context, string, ...lock.Option) (*lock.Lease, error){
		locker.TryRLock,
		func(ctx context.Context, k string, o ...lock.Option) (*lock.Lease, error) {
			return locker.TryAcquire(ctx, k, 3, o...)
		},
	} {
		if _, err := rl(ctx, k); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("a shared lease or permit while a concurrency.Mutex holds the key: %v, want ErrHeld", err)
		}
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := locker.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("dlock's Lock was granted while the concurrency.Mutex holds the key")
	case <-time.After(500 * time.Millisecond):
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var l *lock.Lease
	select {
	case l = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("dlock's Lock not granted after the concurrency.Mutex's Unlock")
	}
	if l == nil {
		t.FailNow()
	}

	// dlock holds: the mutex is refused, and waits.
	if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("concurrency.Mutex.TryLock while dlock holds the key: %v, want ErrLocked", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	select {
	case err := <-locked:
		t.Fatalf("the concurrency.Mutex was granted (%v) while dlock holds the key", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the concurrency.Mutex not granted after dlock's Unlock")
	}
	if _, err := locker.TryLock(ctx, k); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock while the concurrency.Mutex holds the key again: %v, want ErrHeld", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = locker.TryLock(ctx, k)
	if err != nil {
		t.Fatalf("TryLock after the mutex let go: %v", err)
	}
	l.Unlock(ctx)
}
