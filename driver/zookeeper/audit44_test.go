package zookeeper

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit44SoleTurnWithoutOwnNode attacks the lone waiter's grant on
// its blocker's deletion (waiter.turn, no listing): the waiter's own node
// is deleted while it waits (an operator clearing a stuck node, a
// recipe's clean-up), a second waiter queues behind the same blocker,
// and the blocker is released. Both waiters saw one node before their
// own, so both would take the turn: the first one holds no node at all,
// and the second is first in the queue. A listing after the notification
// finds the first waiter's node gone and queues it again, behind the
// second: only one of them may be granted.
func TestAudit44SoleTurnWithoutOwnNode(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := fmt.Sprintf("audit44/sole-own/%d", time.Now().UnixNano())
	holder := h.NewLocker(t, nil)
	held, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// queued waits until key has n nodes, and a little longer, for the
	// last waiter's listing and watch.
	queued := func(n int) []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			cs, err := h.children(key)
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) == n {
				time.Sleep(500 * time.Millisecond)
				return cs
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue %v, want %d nodes", cs, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	type result struct {
		who string
		l   *lock.Lease
	}
	got := make(chan result, 2)
	lockIn := func(who string, l *lock.Locker) {
		go func() {
			lease, err := l.Lock(ctx, key)
			if err != nil {
				lease = nil
			}
			got <- result{who, lease}
		}()
	}
	lockIn("first", h.NewLocker(t, nil))
	cs := queued(2)
	var mine string // the later node: the waiter's
	var top int64 = -1
	for _, c := range cs {
		if ch, ok := parseChild(c); ok && ch.seq > top {
			mine, top = c, ch.seq
		}
	}
	if err := h.raw.Delete(h.kp(key)+"/"+mine, -1); err != nil {
		t.Fatal(err)
	}
	lockIn("second", h.NewLocker(t, nil))
	queued(2)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var granted []result
	timeout := time.After(3 * time.Second)
	for len(granted) < 2 {
		select {
		case r := <-got:
			if r.l == nil {
				t.Fatalf("%s waiter failed", r.who)
			}
			granted = append(granted, r)
			continue
		case <-timeout:
		}
		break
	}
	for _, r := range granted {
		defer r.l.Unlock(context.Background())
	}
	if len(granted) == 2 {
		t.Fatalf("both waiters granted at once after the blocker's release (queue: %v)", func() []string { cs, _ := h.children(key); return cs }())
	}
	if len(granted) == 0 {
		t.Fatal("no waiter granted within 3s of the release")
	}
}
