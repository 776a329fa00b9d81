package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// uniqueKey returns a key no other test uses.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
}

// waitErr waits up to d for a result on c; it fails the test on timeout.
func waitErr(t *testing.T, c <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(d):
		t.Fatalf("%s: still blocked after %v", what, d)
		return nil
	}
}

// blocked fails the test if c delivers within d.
func blocked(t *testing.T, c <-chan error, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("%s returned (err %v) while the key was held", what, err)
	case <-time.After(d):
	}
}

// TestZkLockInterop: a go-zookeeper zk.Lock holder and a dlock holder on
// the same key exclude each other, in both orders, and so do dlock readers
// and zk.Lock.
func TestZkLockInterop(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	h := newHarness(t, servers, testSessionTimeout)
	dl := h.NewLocker(t, nil)
	ctx := context.Background()

	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "exclusive", true: "shared"}[shared], func(t *testing.T) {
			k := uniqueKey(t)
			path := h.kp(k)
			take := func(ctx context.Context) (*lock.Lease, error) {
				if shared {
					return dl.RLock(ctx, k)
				}
				return dl.Lock(ctx, k)
			}
			try := func(ctx context.Context) (*lock.Lease, error) {
				if shared {
					return dl.TryRLock(ctx, k)
				}
				return dl.TryLock(ctx, k)
			}

			// zk.Lock first: dlock waits for it.
			zl := zk.NewLock(h.raw, path, zk.WorldACL(zk.PermAll))
			if err := zl.Lock(); err != nil {
				t.Fatalf("zk.Lock: %v", err)
			}
			if _, err := try(ctx); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("dlock TryLock while zk.Lock holds: err = %v, want ErrNotAcquired", err)
			}
			got := make(chan error, 1)
			var lease *lock.Lease
			go func() {
				var err error
				lease, err = take(ctx)
				got <- err
			}()
			blocked(t, got, 300*time.Millisecond, "dlock Lock")
			if err := zl.Unlock(); err != nil {
				t.Fatalf("zk.Unlock: %v", err)
			}
			if err := waitErr(t, got, 2*time.Second, "dlock Lock after zk.Unlock"); err != nil {
				t.Fatalf("dlock Lock: %v", err)
			}

			// dlock first: zk.Lock waits for it.
			zl2 := zk.NewLock(h.raw, path, zk.WorldACL(zk.PermAll))
			zgot := make(chan error, 1)
			go func() { zgot <- zl2.Lock() }()
			blocked(t, zgot, 300*time.Millisecond, "zk.Lock")
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("dlock Unlock: %v", err)
			}
			if err := waitErr(t, zgot, 2*time.Second, "zk.Lock after dlock Unlock"); err != nil {
				t.Fatalf("zk.Lock: %v", err)
			}
			if _, err := try(ctx); !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("dlock TryLock while zk.Lock holds: err = %v, want ErrNotAcquired", err)
			}
			if err := zl2.Unlock(); err != nil {
				t.Fatalf("zk.Unlock: %v", err)
			}
			l, err := try(ctx)
			if err != nil {
				t.Fatalf("dlock TryLock after zk.Unlock: %v", err)
			}
			l.Unlock(ctx)
		})
	}
}
