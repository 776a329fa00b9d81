package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestConformanceCluster runs the suite against a three-member cluster,
// each Locker's client balancing over every member.
func TestConformanceCluster(t *testing.T) {
	e := testserver.StartEtcdCluster(t, nil)
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return newHarness(t, e.Endpoints()) }, drivertest.Skips{
		"Outage/LockWaits":    "one member covers it (TestConformance)",
		"Outage/TryLockFails": "one member covers it (TestConformance)",
	})
}

// TestFailover: on a three-member cluster, killing the leader, and then
// a follower, keeps a renewed lease held (its Done stays open, nobody
// else is granted the key), and the next grant after its release has a
// higher token.
func TestFailover(t *testing.T) {
	e := testserver.StartEtcdCluster(t, nil)
	e.RequireFaults(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}
	a := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	b := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := "failover"
	la, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		waiting <- l
	}()

	leader, err := e.KillLeader()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader, member %d", leader)
	if _, err := e.WaitLeader(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	holdFor(t, la, waiting, 4*time.Second, "the leader's death")

	follower := (leader + 1) % 3
	if err := e.Node(follower).Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.Node(leader).Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed member %d, restarted member %d", follower, leader)
	holdFor(t, la, waiting, 4*time.Second, "a follower's death and the old leader's restart")

	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var lb *lock.Lease
	select {
	case lb = <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the key after the release")
	}
	if lb == nil {
		t.FailNow()
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after a failover, not above %d", lb.Token(), la.Token())
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Error(err)
	}
	if err := e.Node(follower).Restart(); err != nil {
		t.Fatal(err)
	}
}

// holdFor checks for d that l stays held and the waiter is not granted.
func holdFor(t *testing.T, l *lock.Lease, waiting <-chan *lock.Lease, d time.Duration, after string) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("the lease ended after %s: %v", after, l.Err())
	case w := <-waiting:
		t.Fatalf("another Locker was granted the key (%v) after %s while the lease is held", w != nil, after)
	case <-time.After(d):
	}
	if err := l.Refresh(context.Background(), l.TTL()); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh after %s: %v", after, err)
	}
}
