package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// residueRoot is a root of the test's own, so that only its nodes are
// counted.
func residueRoot(t *testing.T) string {
	var b [6]byte
	rand.Read(b[:])
	return "/dlock-residue-" + hex.EncodeToString(b[:])
}

func residueLocker(t *testing.T, servers []string, root string, n *netCut) *lock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Dial(ctx, servers, &Options{Root: root, SessionTimeout: testSessionTimeout, Dialer: n.dial})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// nodesUnder counts the nodes under path (path excluded), after a sync.
func nodesUnder(c *zk.Conn, path string) (int, error) {
	if _, err := c.Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return 0, err
	}
	children, _, err := c.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	total := len(children)
	for _, name := range children {
		n, err := nodesUnder(c, path+"/"+name)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// useKeyOnce uses key once as the i-th of a mixed workload: an exclusive, a
// shared and a permit's lease released; a grant of the dead Locker, whose
// session is left to expire; a wait behind a holder given up; a wait of the
// dead Locker behind a holder, whose lease it returns to be released once
// the dead Locker is cut off.
func useKeyOnce(t *testing.T, live, dead *lock.Locker, i int, key string) *lock.Lease {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		l   *lock.Lease
		err error
	)
	switch i % 6 {
	case 5:
		holder, err := live.Lock(ctx, key)
		if err != nil {
			t.Errorf("%s: Lock: %v", key, err)
			return nil
		}
		go dead.Lock(context.Background(), key) // ends with the Locker
		return holder
	case 0:
		l, err = live.Lock(ctx, key)
	case 1:
		l, err = live.RLock(ctx, key)
	case 2:
		l, err = live.Acquire(ctx, key, 3)
	case 3:
		if _, err := dead.Lock(ctx, key); err != nil {
			t.Errorf("%s: Lock: %v", key, err)
		}
		return nil // the Locker is cut off below: its session expires
	case 4:
		holder, err := live.Lock(ctx, key)
		if err != nil {
			t.Errorf("%s: Lock: %v", key, err)
			return nil
		}
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, werr := live.Lock(wctx, key)
		wcancel()
		if !errors.Is(werr, lock.ErrNotAcquired) {
			t.Errorf("%s: a wait behind a holder gave %v", key, werr)
		}
		l = holder
	}
	if err != nil {
		t.Errorf("%s: %v", key, err)
		return nil
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("%s: Unlock: %v", key, err)
	}
	return nil
}

// TestAudit38KeysUsedOnceLeaveNoNodes: 1,000 keys used once (released,
// left to a session's expiry, waits given up, waiters whose session ended,
// permits, shared leases)
// leave no node under the root once the server's container check ran
// (every second on the test servers: -Dznode.container.checkIntervalMs;
// 60 s by default): each key node is a container, deleted when its last
// child goes, and so is the root.
func TestAudit38KeysUsedOnceLeaveNoNodes(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	root := residueRoot(t)
	cut := &netCut{}
	live := residueLocker(t, servers, root, &netCut{})
	dead := residueLocker(t, servers, root, cut)
	const n, workers = 1000, 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held []*lock.Lease // keys the dead Locker waits for
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if l := useKeyOnce(t, live, dead, i, fmt.Sprintf("audit38-once-%d", i)); l != nil {
					mu.Lock()
					held = append(held, l)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	time.Sleep(time.Second) // the dead Locker's waits are queued
	cut.setDown(true)
	for _, l := range held {
		if err := l.Unlock(context.Background()); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
	if err := live.Close(); err != nil { // waits for the waits' Leave
		t.Fatalf("Close: %v", err)
	}
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	left, err := nodesUnder(raw, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("right after use: %d nodes under %s", left, root)
	// The dead session expires (2 s), then its nodes go, then the
	// containers, at most 10,000 a minute (znode.container.maxPerMinute).
	deadline := time.Now().Add(90 * time.Second)
	for left > 0 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		if left, err = nodesUnder(raw, root); err != nil {
			t.Fatal(err)
		}
	}
	if left > 0 {
		t.Errorf("%d keys used once left %d nodes under %s 90 s later; want none", n, left, root)
	}
}

// TestAudit38TokenAfterKeyNodeGone: a key whose node the server deleted
// (an empty container) gets a larger token on its next grant: the token
// is the lock node's czxid, and zxids only grow.
func TestAudit38TokenAfterKeyNodeGone(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	root := residueRoot(t)
	l := residueLocker(t, servers, root, &netCut{})
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const key = "audit38-token"
	var last uint64
	for i := range 2 {
		lease, err := l.Lock(ctx, key)
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if lease.Token() <= last {
			t.Fatalf("grant %d after the key node went: token %d, before %d", i, lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		kp := keyPath(root, key)
		for {
			ok, _, err := raw.Exists(kp)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s still there after 2 minutes", kp)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
