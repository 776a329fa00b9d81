package zookeeper

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// opGetChildren2 and opGetData are go-zookeeper's opcodes of a listing and
// of the read that sets a waiter's watch.
const opGetChildren2, opGetData = 12, 4

// TestHandOffToSoleWaiter checks the hand-off to a waiter whose listing
// showed one node before its own: when that node's deletion is notified,
// the waiter is first (sequence numbers only grow) and is granted without
// listing the queue again. With two nodes before it at its listing, the
// deletion of its predecessor does not tell whether the other one is gone
// too (the predecessor may have left the queue), so it lists again.
func TestHandOffToSoleWaiter(t *testing.T) {
	addrs := testserver.SharedZooKeeper(t).Addrs()
	ctx := context.Background()
	open := func(ops *opCounter) *lock.Locker {
		o := &Options{Root: testRoot, SessionTimeout: testSessionTimeout}
		if ops != nil {
			o.Dialer = func(network, addr string, timeout time.Duration) (net.Conn, error) {
				c, err := net.DialTimeout(network, addr, timeout)
				if err != nil {
					return nil, err
				}
				return &countConn{Conn: c, ops: ops}, nil
			}
		}
		l, err := Dial(ctx, addrs, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	// wait starts l's Lock of key once its watch is set: it returns the
	// lease's channel.
	wait := func(l *lock.Locker, ops *opCounter, key string) <-chan *lock.Lease {
		got := make(chan *lock.Lease, 1)
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			h, err := l.Lock(lctx, key)
			if err != nil {
				t.Errorf("waiting Lock: %v", err)
			}
			got <- h
		}()
		deadline := time.Now().Add(10 * time.Second)
		for ops.n[opGetData].Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the waiter set no watch within 10s")
			}
			time.Sleep(time.Millisecond)
		}
		// The getData is sent: give its reply (the watch set) time to
		// come, so that the release is not applied before it.
		time.Sleep(300 * time.Millisecond)
		return got
	}
	for _, tc := range []struct {
		before   int
		listings int64
	}{{1, 0}, {2, 1}} {
		t.Run(fmt.Sprintf("%d before", tc.before), func(t *testing.T) {
			key := fmt.Sprintf("handoff-sole/%d/%d", tc.before, time.Now().UnixNano())
			holder := open(nil)
			h, err := holder.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			var middle <-chan *lock.Lease
			if tc.before == 2 {
				mops := &opCounter{}
				middle = wait(open(mops), mops, key)
			}
			ops := &opCounter{}
			last := wait(open(ops), ops, key)
			listed := ops.n[opGetChildren2].Load()
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if middle != nil {
				m := <-middle
				if m == nil {
					t.FailNow()
				}
				select {
				case <-last:
					t.Fatal("the last waiter was granted while the middle one held the key")
				case <-time.After(50 * time.Millisecond):
				}
				if err := m.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			g := <-last
			if g == nil {
				t.FailNow()
			}
			defer g.Unlock(ctx)
			if n := ops.n[opGetChildren2].Load() - listed; n != tc.listings {
				t.Errorf("the last waiter listed the queue %d times after its watch was set, want %d", n, tc.listings)
			}
		})
	}
}
