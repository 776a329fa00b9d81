package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// longTTL keeps lock's own renewal and deadline out of the way (a renewal
// every 20s, a deadline a minute out), so that these tests see what the
// driver's session monitor does.
var longTTL = &lock.Options{TTL: time.Minute}

func (h *harness) newCutLocker(t *testing.T, o *lock.Options) (*lock.Locker, *netCut) {
	l := h.NewLocker(t, o)
	h.mu.Lock()
	defer h.mu.Unlock()
	return l, h.cuts[l]
}

// TestDisconnectionEndsLeases: cut off from the server, a holder's lease
// ends when the session may expire (its last proof plus the session
// timeout), before another client is granted the key, even though its
// TTL is far longer.
func TestDisconnectionEndsLeases(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	a, cut := h.newCutLocker(t, longTTL)
	b := h.NewLocker(t, nil)
	k := uniqueKey(t)
	ctx := context.Background()
	lease, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	lostAt := make(chan time.Time, 1)
	go func() { <-lease.Done(); lostAt <- time.Now() }()
	cutAt := time.Now()
	cut.setDown(true)
	c, cancel := context.WithTimeout(ctx, h.timeout+5*time.Second)
	defer cancel()
	lb, err := b.Lock(c, k)
	grantedAt := time.Now()
	if err != nil {
		t.Fatalf("B.Lock after A's session expired: %v", err)
	}
	defer lb.Unlock(ctx)
	select {
	case at := <-lostAt:
		if !at.Before(grantedAt) {
			t.Errorf("A's Done closed %v after B was granted the key", at.Sub(grantedAt))
		}
		if d := at.Sub(cutAt); d < h.timeout/2 || d > h.timeout+time.Second {
			t.Errorf("A's Done closed %v after the cut; want about the session timeout %v", d, h.timeout)
		}
	default:
		t.Fatalf("A's Done still open when B was granted the key")
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Errorf("A's Err() = %v, want ErrLost", lease.Err())
	}
}

// TestReconnectionKeepsLeases: a connection that comes back before the
// session deadline keeps the leases; a lease whose node went meanwhile is
// lost as soon as the connection is back, not at its next renewal.
func TestReconnectionKeepsLeases(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), 6*time.Second)
	a, cut := h.newCutLocker(t, longTTL)
	ctx := context.Background()
	kept, gone := uniqueKey(t)+"/kept", uniqueKey(t)+"/gone"
	lk, err := a.Lock(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := a.Lock(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	cut.setDown(true)
	if err := h.DeleteKey(ctx, gone); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	restoredAt := time.Now()
	cut.setDown(false) // go-zookeeper redials within a second
	select {
	case <-lg.Done():
		t.Logf("lease of the deleted node lost %v after the connection came back", time.Since(restoredAt))
	case <-time.After(4 * time.Second):
		t.Fatalf("lease whose node was deleted during the disconnection still open 4s after the reconnection")
	}
	if !errors.Is(lg.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lg.Err())
	}
	time.Sleep(h.timeout) // past the deadline the disconnection would have set
	select {
	case <-lk.Done():
		t.Fatalf("lease lost across a short disconnection: %v", lk.Err())
	default:
	}
	if left := h.childrenAfter(t, kept, 1, 0); len(left) != 1 {
		t.Errorf("nodes of the kept lease's key: %q", left)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the reconnection: %v", err)
	}
}

// TestSessionExpiryEndsLeasesAtOnce: when go-zookeeper learns that the
// session expired, every lease of the session ends at once. The Locker is
// made with New over a connection whose session timeout it is told is a
// minute, while the server's is 2s, so that the expiry, not the deadline,
// is what ends the lease. The driver has only conn.State and
// conn.SessionID to go by (New does not get the event channel).
func TestSessionExpiryEndsLeasesAtOnce(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	cut := &netCut{}
	conn, real := rawConn(t, servers, 2*time.Second, cut.dial)
	a := New(conn, &Options{Options: lock.Options{TTL: time.Minute}, Root: testRoot, SessionTimeout: time.Minute})
	defer a.Close()
	ctx := context.Background()
	k := uniqueKey(t)
	lease, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	sid := conn.SessionID()
	cut.setDown(true)
	time.Sleep(real + time.Second) // the server expires the session
	restoredAt := time.Now()
	cut.setDown(false)
	select {
	case <-lease.Done():
		t.Logf("lease lost %v after the connection came back", time.Since(restoredAt))
	case <-time.After(3 * time.Second):
		t.Fatalf("lease still open 3s after the connection came back to an expired session")
	}
	if err := lease.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, zk.ErrSessionExpired) {
		t.Errorf("Err() = %v, want ErrLost and zk.ErrSessionExpired", err)
	}
	if conn.SessionID() == sid {
		t.Errorf("go-zookeeper kept the expired session %#x", sid)
	}
	// A new session serves new leases; Close leaves the caller's conn open.
	l2, err := a.TryLock(ctx, k)
	if err != nil {
		t.Fatalf("TryLock in the new session: %v", err)
	}
	l2.Unlock(ctx)
	a.Close()
	if _, _, err := conn.Exists("/"); err != nil || conn.State() != zk.StateHasSession {
		t.Errorf("the caller's connection after Close: state %v, err %v", conn.State(), err)
	}
}
