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

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
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
	var lockers []lock.Locker
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
