package zookeeper

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// children lists the nodes of key, polling up to wait until want of them
// are left.
func (h *harness) childrenAfter(t *testing.T, key string, want int, wait time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		left, err := h.Residue(context.Background(), key)
		if err != nil {
			t.Fatalf("listing %s: %v", key, err)
		}
		if len(left) <= want || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNoOrphansAfterRandomCancels: many waiters, exclusive and shared, on
// several Lockers, cancelled at random moments, from before their create
// is sent to long after they queued, leave no node behind.
func TestNoOrphansAfterRandomCancels(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	holder := h.NewLocker(t, nil)
	var waiters []*lock.Locker
	for range 3 {
		waiters = append(waiters, h.NewLocker(t, nil))
	}
	k := uniqueKey(t)
	held, err := holder.Lock(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		bad  []error
		seen int
	)
	const n = 90
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d time.Duration
			switch i % 3 {
			case 0: // mostly while the create is under way
				d = time.Duration(rand.IntN(2000)) * time.Microsecond
			case 1:
				d = time.Duration(rand.IntN(50)) * time.Millisecond
			default:
				d = time.Duration(rand.IntN(400)) * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			w := waiters[i%len(waiters)]
			var err error
			if i%4 == 0 {
				_, err = w.RLock(ctx, k)
			} else {
				_, err = w.Lock(ctx, k)
			}
			mu.Lock()
			defer mu.Unlock()
			seen++
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				bad = append(bad, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range bad {
		t.Errorf("cancelled waiter: err = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if left := h.childrenAfter(t, k, 1, 2*time.Second); len(left) != 1 {
		t.Errorf("%d waiters cancelled; nodes left besides the holder's: %q", seen, left)
	}
	if err := held.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := h.childrenAfter(t, k, 0, time.Second); len(left) != 0 {
		t.Errorf("nodes left after the holder left: %q", left)
	}
	l, err := waiters[0].TryLock(context.Background(), k)
	if err != nil {
		t.Fatalf("key not free after every waiter was cancelled: %v", err)
	}
	l.Unlock(context.Background())
}

// TestLostCreateReply: when the reply to a create is lost (the connection
// drops after the server applied it), the node is found again by its
// owner prefix: TryLock and Lock go on with it, and a cancelled or refused
// attempt deletes it.
func TestLostCreateReply(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	ctx := context.Background()
	newLocker := func() (*lock.Locker, *netCut) {
		l := h.NewLocker(t, nil)
		h.mu.Lock()
		defer h.mu.Unlock()
		return l, h.cuts[l]
	}
	onlyOwn := func(k string, lease *lock.Lease) {
		t.Helper()
		left := h.childrenAfter(t, k, 1, 0)
		if len(left) != 1 || !strings.Contains(left[0], "-lock-") {
			t.Errorf("nodes of %q: %q, want exactly the holder's", k, left)
		}
	}

	t.Run("TryLock goes on with the node", func(t *testing.T) {
		l, cut := newLocker()
		k := uniqueKey(t)
		cut.loseCreateReply()
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock with a lost create reply: %v", err)
		}
		if cut.dropped.Load() != 1 {
			t.Fatalf("the create reply was not lost (dropped %d)", cut.dropped.Load())
		}
		onlyOwn(k, lease)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if left := h.childrenAfter(t, k, 0, time.Second); len(left) != 0 {
			t.Errorf("nodes left: %q", left)
		}
	})

	t.Run("refused TryLock deletes the node", func(t *testing.T) {
		a := h.NewLocker(t, nil)
		l, cut := newLocker()
		k := uniqueKey(t)
		held, err := a.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		cut.loseCreateReply()
		if _, err := l.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryLock of a held key: err = %v", err)
		}
		if cut.dropped.Load() != 1 {
			t.Fatalf("the create reply was not lost")
		}
		onlyOwn(k, held)
		held.Unlock(ctx)
	})

	t.Run("cancelled Lock deletes the node", func(t *testing.T) {
		a := h.NewLocker(t, nil)
		l, cut := newLocker()
		k := uniqueKey(t)
		held, err := a.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		cut.loseCreateReply()
		c, cancel := context.WithTimeout(ctx, 3*time.Second) // past the reconnection
		defer cancel()
		if _, err := l.Lock(c, k); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held key: err = %v", err)
		}
		if cut.dropped.Load() != 1 {
			t.Fatalf("the create reply was not lost")
		}
		onlyOwn(k, held)
		held.Unlock(ctx)
		if left := h.childrenAfter(t, k, 0, time.Second); len(left) != 0 {
			t.Errorf("nodes left: %q", left)
		}
	})

	t.Run("Lock waits with the node and gets the key", func(t *testing.T) {
		a := h.NewLocker(t, nil)
		l, cut := newLocker()
		k := uniqueKey(t)
		held, err := a.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		cut.loseCreateReply()
		got := make(chan error, 1)
		var lease *lock.Lease
		go func() {
			var err error
			lease, err = l.Lock(ctx, k)
			got <- err
		}()
		time.Sleep(2 * time.Second) // reconnected and queued
		left := h.childrenAfter(t, k, 2, 0)
		if len(left) != 2 {
			t.Errorf("queue of %q: %q, want the holder and the waiter", k, left)
		}
		held.Unlock(ctx)
		if err := waitErr(t, got, 5*time.Second, "Lock"); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		onlyOwn(k, lease)
		lease.Unlock(ctx)
	})
}

// TestNoOrphansWithCallersConn: over the caller's connection, whose
// session outlives the Locker, waiters cancelled at random and Close leave
// no node in that session.
func TestNoOrphansWithCallersConn(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	h := newHarness(t, servers, testSessionTimeout)
	conn, timeout := rawConn(t, servers, testSessionTimeout, nil)
	holder := h.NewLocker(t, nil)
	k := uniqueKey(t)
	ctx := context.Background()
	held, err := holder.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	l := New(conn, &Options{Root: testRoot, SessionTimeout: timeout})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
			defer cancel()
			l.Lock(c, k)
		}()
	}
	waiting := make(chan error, 1)
	go func() { _, err := l.Lock(ctx, k); waiting <- err }()
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waiting; !errors.Is(err, lock.ErrClosed) {
		t.Errorf("waiter at Close: err = %v, want ErrClosed", err)
	}
	if left := h.childrenAfter(t, k, 1, time.Second); len(left) != 1 {
		t.Errorf("nodes left besides the holder's: %q", left)
	}
	if conn.State() != zk.StateHasSession {
		t.Errorf("the caller's connection after Close: %v", conn.State())
	}
	held.Unlock(ctx)
}
