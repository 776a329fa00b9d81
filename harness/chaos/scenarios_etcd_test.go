package chaos

import (
	"time"
)

// etcd's scenarios, on a three-member cluster: a member killed, the
// leader killed, the leader cut off from a holder that talks to it alone.
func init() {
	cluster := ServerOptions{EtcdCluster: true}
	only := []Backend{EtcdBackend}
	scenarios = append(scenarios,
		&scenario{name: "etcd/member-kill", backends: only, server: cluster, short: true, run: etcdMemberKill},
		&scenario{name: "etcd/leader-loss", backends: only, server: cluster, short: true, run: etcdLeaderLoss},
		&scenario{name: "etcd/leader-partition", backends: only, server: cluster, short: true, run: etcdLeaderPartition},
	)
	for _, s := range scenarios {
		if s.name == "server-restart/persistent" || s.name == "server-restart/persistent-long" || s.name == "server-restart/unlock-in-outage" {
			s.backends = append(s.backends, EtcdBackend)
		}
	}
}

// etcdMemberKill: A holds through all three members; a follower is
// killed and comes back later. A keeps its lease (a quorum is left), C is
// refused while A holds, B is granted once A unlocks.
func etcdMemberKill(e *env) {
	e.etcdKill(false)
}

// etcdLeaderLoss: as etcdMemberKill, the leader killed: an election
// follows; A's lease survives it or ends with Done, and B is granted
// only after.
func etcdLeaderLoss(e *env) {
	e.etcdKill(true)
}

func (e *env) etcdKill(leader bool) {
	a, b, c := e.inproc("A", e.srv.Addrs), e.inproc("B", e.srv.Addrs), e.inproc("C", e.srv.Addrs)
	e.recoverWith = b
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	waiting := e.lockAsync(b, LockArgs{Timeout: 60 * time.Second})
	time.Sleep(200 * time.Millisecond)
	et := e.srv.Etcd
	lead, err := et.Leader()
	e.must(err, "find the leader")
	idx, kind := lead, "kill-leader"
	if !leader {
		idx, kind = (lead+1)%len(et.Nodes), "kill-member"
	}
	end := e.fault(kind, "server")
	start := time.Now()
	e.must(et.Node(idx).Kill(), "kill a member")
	_, err = et.WaitLeader(30 * time.Second)
	e.must(err, "a leader")
	e.note("a leader %v after the kill", time.Since(start).Round(100*time.Millisecond))
	e.cTriesWhileAHolds(c)
	time.Sleep(e.bound)
	kept := !a.WaitDone(0)
	e.note("A kept its lease: %v", kept)
	if kept {
		e.expectWrites(ga, a, 1)
		a.Unlock(5 * time.Second)
	}
	select {
	case r := <-waiting:
		if e.expect(r.err == nil, "B granted: %s", desc(r.err)) {
			e.expectWrites(r.g, b, 1)
			b.Unlock(5 * time.Second)
		}
	case <-time.After(65 * time.Second):
		e.expect(false, "B's Lock did not return")
	}
	e.must(et.Node(idx).Restart(), "restart the member")
	end()
}

// etcdLeaderPartition: A talks to the leader alone, through a proxy that
// then drops every byte past A's TTL; B talks to all members. A must see
// Done by its deadline, B be granted only after; the cut heals.
func etcdLeaderPartition(e *env) {
	lead, err := e.srv.Etcd.Leader()
	e.must(err, "find the leader")
	p := e.proxy(lead)
	a, b := e.inproc("A", []string{p.Addr()}), e.inproc("B", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	waiting := e.lockAsync(b, LockArgs{Timeout: 3*e.bound + 10*time.Second})
	time.Sleep(100 * time.Millisecond)
	end := e.fault("partition", "A-leader")
	p.Partition()
	e.expect(a.WaitDone(e.bound+time.Second), "A lost its lease within %v of the cut", e.bound+time.Second)
	select {
	case r := <-waiting:
		if e.expect(r.err == nil, "B granted during the cut: %s", desc(r.err)) {
			e.expectWrites(r.g, b, 1)
			p.Heal()
			end()
			time.Sleep(500 * time.Millisecond)
			b.Unlock(5 * time.Second)
		}
	case <-time.After(3*e.bound + 15*time.Second):
		e.expect(false, "B's Lock did not return")
	}
	p.Heal()
	end()
}
