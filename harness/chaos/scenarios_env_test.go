package chaos

import (
	"time"
)

// The environments' scenarios (make chaos only): PostgreSQL on a database
// whose default isolation level is repeatable read, or serializable
// (ServerOptions.PGIsolation), under the holder-kill and lost-release
// scenarios; and an etcd follower frozen while A holds through every
// member and B waits.
func init() {
	pg := []Backend{PostgresBackend}
	for _, level := range []string{"repeatable read", "serializable"} {
		o := ServerOptions{PGIsolation: level}
		name := "postgres/" + map[string]string{"repeatable read": "repeatable-read", "serializable": "serializable"}[level]
		scenarios = append(scenarios,
			&scenario{name: name + "/holder-kill", backends: pg, server: o, run: holderKill},
			&scenario{name: name + "/lost-release", backends: pg, server: o, run: lostReleaseReply},
		)
	}
	scenarios = append(scenarios,
		&scenario{name: "etcd/follower-freeze", backends: []Backend{EtcdBackend}, server: ServerOptions{EtcdCluster: true}, run: etcdFollowerFreeze})
}

// etcdFollowerFreeze: A holds through all three members; a follower is
// frozen (SIGSTOP) for twice the bound, then resumes. The leader and the
// other follower keep the quorum, so A must keep its lease, C be refused
// while A holds, and B, waiting since before the freeze, be granted once
// A unlocks.
func etcdFollowerFreeze(e *env) {
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
	idx := (lead + 1) % len(et.Nodes)
	end := e.fault("freeze-follower", "server")
	e.must(et.Node(idx).Pause(), "freeze a follower")
	e.note("member %d (follower; leader %d) frozen for %v", idx, lead, 2*e.bound)
	e.cTriesWhileAHolds(c)
	time.Sleep(2 * e.bound)
	e.must(et.Node(idx).Resume(), "resume the follower")
	end()
	if e.expect(!a.WaitDone(0), "A kept its lease across the follower's freeze") {
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
}
