package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// slot watches one key for double grants: when a lease is granted, the
// previous holder's Done must already be closed, and tokens must grow.
type slot struct {
	mu        sync.Mutex
	holder    *lock.Lease
	lastToken uint64
}

func (s *slot) granted(l *lock.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder != nil {
		select {
		case <-s.holder.Done():
		default:
			return fmt.Errorf("double grant of %q: token %d granted while token %d's Done is open", l.Key(), l.Token(), s.holder.Token())
		}
	}
	if l.Token() <= s.lastToken {
		return fmt.Errorf("token %d of %q after %d", l.Token(), l.Key(), s.lastToken)
	}
	s.holder, s.lastToken = l, l.Token()
	return nil
}

// releasing records that the holder stopped using l: it is about to
// unlock, so the next grant may come before its Unlock returns.
func (s *slot) releasing(l *lock.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder == l {
		s.holder = nil
	}
}

// TestEnsembleLeaderKill: Lockers contend for a few keys on a three-server
// ensemble while its leader is killed, and one of them is cut off from
// every server at the same moment, for longer than its session timeout.
// No key is ever granted while the previous holder's Done is open, tokens
// keep growing across the leader change, and grants resume once a new
// leader is elected. Leases held across the kill either survive (the
// session moves to another server) or end with Done closed first, as the
// cut-off Locker's do.
func TestEnsembleLeaderKill(t *testing.T) {
	z := testserver.StartZooKeeperEnsemble(t, nil)
	z.RequireFaults(t)
	h := newHarness(t, z.Addrs(), 6*time.Second)
	var lockers []*lock.Locker
	for range 3 {
		lockers = append(lockers, h.NewLocker(t, &lock.Options{TTL: time.Second}))
	}
	keys := []string{uniqueKey(t) + "/a", uniqueKey(t) + "/b", uniqueKey(t) + "/c"}
	slots := map[string]*slot{}
	for _, k := range keys {
		slots[k] = &slot{}
	}

	ctx, stop := context.WithCancel(context.Background())
	var (
		wg                          sync.WaitGroup
		grants, grantsAfter, losses atomic.Int32
		killed                      atomic.Bool
		errs                        = make(chan error, 100)
	)
	for i, l := range lockers {
		hold := func() time.Duration { return time.Duration(20+rand.IntN(300)) * time.Millisecond }
		if i == 0 { // the Locker to be cut off holds on until it loses
			hold = func() time.Duration { return time.Minute }
		}
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					c, cancel := context.WithTimeout(ctx, 20*time.Second)
					lease, err := l.Lock(c, k)
					cancel()
					if err != nil {
						if ctx.Err() == nil && !errors.Is(err, lock.ErrNotAcquired) {
							errs <- err
						}
						time.Sleep(50 * time.Millisecond)
						continue
					}
					if err := slots[k].granted(lease); err != nil {
						errs <- err
					}
					grants.Add(1)
					if killed.Load() {
						grantsAfter.Add(1)
					}
					select { // hold it a while, or until it is lost
					case <-lease.Done():
						losses.Add(1)
					case <-time.After(hold()):
					case <-ctx.Done():
					}
					slots[k].releasing(lease)
					lease.Unlock(context.Background())
				}
			}()
		}
	}
	time.Sleep(2 * time.Second)
	before := grants.Load()
	h.mu.Lock()
	cut := h.cuts[lockers[0]]
	h.mu.Unlock()
	cut.setDown(true)
	leader, err := z.KillLeader()
	if err != nil {
		t.Fatalf("KillLeader: %v", err)
	}
	killed.Store(true)
	t.Logf("killed leader %d after %d grants", leader, before)
	if _, err := z.WaitLeader(30 * time.Second); err != nil {
		t.Fatalf("no new leader: %v", err)
	}
	time.Sleep(h.timeout + 2*time.Second)
	cut.setDown(false)
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("grants: %d before the kill, %d after; leases lost: %d", before, grantsAfter.Load(), losses.Load())
	if before == 0 || grantsAfter.Load() == 0 {
		t.Errorf("grants before the kill %d, after %d: want both", before, grantsAfter.Load())
	}
	if losses.Load() == 0 {
		t.Errorf("the cut-off Locker lost no lease: it held none, so the test proved little")
	}
}

// TestEnsembleFollowerProof: a lease's session is proven alive only as far
// as the leader knows of it. A follower tells the leader which of its
// sessions it heard from in its replies to the leader's pings (every half
// tick); a request it forwards does not touch the session on the leader.
// The Locker talks to one follower only. Right after a sync answered
// through that follower, the follower freezes: the leader never hears of
// the sync, and expires the session a session timeout after the last
// touch it did hear of. The lease must end (Lost) before its node goes,
// else another client could be granted the key while it is held.
//
// The timing makes the gap large: the Locker's previous request (a sync
// too) comes right after one of go-zookeeper's pings (one every third of
// the session timeout, from the session's start), and the last one just
// before the next ping, so that the leader's last news of the session is
// a third of the timeout older than the last answered sync.
func TestEnsembleFollowerProof(t *testing.T) {
	z := testserver.StartZooKeeperEnsemble(t, nil)
	z.RequireFaults(t)
	leader, err := z.WaitLeader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f := (leader + 1) % len(z.Nodes)
	observer, _ := rawConn(t, []string{z.Node(leader).Addr()}, 10*time.Second, nil)

	d := newTestDriver(t, []string{z.Node(f).Addr()}, &Options{Root: testRoot, SessionTimeout: 4 * time.Second})
	session := time.Now() // go-zookeeper's ping ticker started about now
	T := d.sessionTimeout()
	ping := T / 3
	l := newLease(uniqueKey(t), driver.Exclusive)
	lost := make(chan time.Time, 1)
	l.Lost = func(error) { lost <- time.Now() }
	ctx := context.Background()
	if err := d.Acquire(ctx, l); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	path := l.Data.(*grant).path
	ok, _, gone, err := observer.ExistsW(path)
	if err != nil || !ok {
		t.Fatalf("observer: %s exists %v, %v", path, ok, err)
	}
	sync := func() time.Time {
		sent := time.Now()
		if _, err := write(ctx, d, func() (string, error) { return d.conn.Sync("/") }); err != nil {
			t.Fatalf("sync: %v", err)
		}
		return sent
	}
	// Right after a ping, then just before the next one.
	next := session.Add((time.Since(session)/ping + 1) * ping)
	time.Sleep(time.Until(next.Add(40 * time.Millisecond)))
	first := sync()
	time.Sleep(time.Until(first.Add(ping - 150*time.Millisecond)))
	last := sync()
	if err := z.Node(f).Pause(); err != nil {
		t.Fatal(err)
	}
	defer z.Node(f).Resume()

	var lostAt, goneAt time.Time
	for timeout := time.After(T + 10*time.Second); lostAt.IsZero() || goneAt.IsZero(); {
		select {
		case lostAt = <-lost:
		case ev := <-gone:
			if ev.Type == zk.EventNodeDeleted {
				goneAt = time.Now()
				break
			}
			t.Logf("observer's watch at %v: %+v (observer on %s, leader %s, follower %s); watching again", time.Since(last).Round(time.Millisecond), ev, observer.Server(), z.Node(leader).Addr(), z.Node(f).Addr())
			for {
				ok, _, gone, err = observer.ExistsW(path)
				if err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if !ok {
				goneAt = time.Now() // an upper bound
				t.Logf("node gone at %v at the latest", goneAt.Sub(last).Round(time.Millisecond))
			}
		case <-timeout:
			t.Fatalf("after %v: lease lost at %v, node gone at %v (zero: not yet)", T+10*time.Second, lostAt, goneAt)
		}
	}
	t.Logf("session timeout %v; from the last answered sync: the lease ended after %v, the node went after %v (syncs %v apart)",
		T, lostAt.Sub(last).Round(time.Millisecond), goneAt.Sub(last).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond))
	if !lostAt.Before(goneAt) {
		t.Errorf("the lease ended %v after the leader expired its session and deleted its node", lostAt.Sub(goneAt).Round(time.Millisecond))
	}
}
