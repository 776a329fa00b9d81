package etcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// One bad member of three must cost a Locker nothing while a quorum
// answers: a holder renewed automatically keeps its 3 s lease, a queued
// waiter is granted soon after the release, and Close releases what it
// holds at once. Each test makes one member bad in its own way: frozen
// (SIGSTOP) as a follower or as the leader, cut off behind a proxy that
// stops forwarding, or slowed behind a proxy that holds its replies.

func TestAudit38FrozenFollower(t *testing.T) {
	e := testserver.StartEtcdCluster(t, nil)
	e.RequireFaults(t)
	leader, err := e.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bad := (leader + 1) % 3
	badMemberCheck(t, e, e.Addrs(), bad, "a frozen follower", e.Node(bad).Pause, e.Node(bad).Resume)
}

func TestAudit38FrozenLeader(t *testing.T) {
	e := testserver.StartEtcdCluster(t, nil)
	e.RequireFaults(t)
	leader, err := e.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	badMemberCheck(t, e, e.Addrs(), leader, "a frozen leader", e.Node(leader).Pause, e.Node(leader).Resume)
}

func TestAudit38MemberCutOff(t *testing.T) {
	e := testserver.StartEtcdCluster(t, nil)
	addrs := e.Addrs()
	p := newDelayProxy(t, addrs[2])
	addrs[2] = p.addr()
	hold := func() error { p.hold(); return nil }
	release := func() error { p.release(); return nil }
	badMemberCheck(t, e, addrs, 2, "a member cut off behind a proxy", hold, release)
}

func TestAudit38SlowMember(t *testing.T) {
	e := testserver.StartEtcdCluster(t, nil)
	addrs := e.Addrs()
	p := newDelayProxy(t, addrs[2])
	addrs[2] = p.addr()
	slow := func() error { p.setDelay(4 * time.Second); return nil }
	fast := func() error { p.setDelay(0); return nil }
	badMemberCheck(t, e, addrs, 2, "a member slowed by 4 s", slow, fast)
}

// badMemberCheck opens Lockers by URL on addrs (the Locker's own client
// configuration), makes member bad go bad with fault, and checks that a
// holder keeps its lease, a waiter is granted after the release, and
// Close releases at once; heal undoes the fault at the end.
func badMemberCheck(t *testing.T, e *testserver.Etcd, addrs []string, bad int, what string, fault, heal func() error) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	url := "etcd://" + strings.Join(addrs, ",") + "/" + strings.TrimSuffix(prefix, "/") + "?ttl=3s"
	open := func() *lock.Locker {
		l, err := lock.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	holder, waiter, closer := open(), open(), open()
	var good []string
	for i, a := range e.Addrs() {
		if i != bad {
			good = append(good, a)
		}
	}
	raw := rawClient(t, good)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Several keys per Locker: the client's requests go round every
	// member before the fault.
	var held []*lock.Lease
	for i := range 4 {
		l, err := holder.Lock(ctx, fmt.Sprintf("bad-member-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	closing, err := closer.Lock(ctx, "bad-member-close")
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *lock.Lease, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
		defer wcancel()
		l, err := waiter.Lock(wctx, "bad-member-0")
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
		granted <- l
	}()
	time.Sleep(time.Second) // the waiter queues

	if err := fault(); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			heal()
		}
	}()
	t.Logf("member %d made bad: %s", bad, what)

	// Four TTLs: every renewal of the holder meets the bad member.
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, l := range held {
			if err := l.Err(); err != nil {
				t.Fatalf("with %s, a holder lost its 3 s lease: %v", what, err)
			}
		}
		select {
		case w := <-granted:
			t.Fatalf("with %s, the waiter was granted (%v) while the key is held", what, w != nil)
		default:
		}
	}

	start := time.Now()
	uctx, ucancel := context.WithTimeout(ctx, 10*time.Second)
	err = held[0].Unlock(uctx)
	ucancel()
	if err != nil {
		t.Errorf("with %s, Unlock after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
	}
	select {
	case w := <-granted:
		if w != nil {
			t.Logf("the waiter was granted %v after the release began", time.Since(start).Round(time.Millisecond))
			w.Unlock(ctx)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("with %s, the waiter was not granted within 15 s of the release", what)
	}

	start = time.Now()
	if err := closer.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	took := time.Since(start)
	queue := prefix + "q/bad-member-close/"
	resp, err := raw.Get(ctx, queue, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("with %s, Close (%v) left the grant of %s on etcd (its lease ended: %v)", what, took.Round(time.Millisecond), closing.Key(), closing.Err())
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	healed = true
}
