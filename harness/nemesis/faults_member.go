package nemesis

import (
	"fmt"
	"time"
)

// Member faults, on a target of an etcd cluster that declares members:
// one follower at a time (the leader and the other follower keep their
// quorum, so no client that can reach them may notice) is frozen
// (SIGSTOP, then SIGCONT), cut off from every client (its peers still
// reach it), or slowed (every request and reply through it held up to
// 700ms). None is a server fault: liveness is judged across them, and a
// witness holds a key and waits for it meanwhile (see witness). The
// run's summary says which member, and when.

// memberFaults adds the member faults.
func (n *nemesis) memberFaults(add func(string, int, func() bool)) {
	add("member-freeze", 3, n.memberFault("frozen", n.memberFreeze))
	add("member-cut", 2, n.memberFault("cut off", n.memberCut))
	add("member-slow", 2, n.memberFault("slowed", n.memberSlow))
}

// memberFault makes a fault of one follower, chosen at random, for a
// while: do applies it to member i for d.
func (n *nemesis) memberFault(what string, do func(i int, d time.Duration)) func() bool {
	return func() bool {
		if !n.serverBusy.CompareAndSwap(false, true) {
			return false
		}
		d := n.between(time.Second, 2*n.r.tg.Bound)
		pick := n.rng.IntN(len(n.r.srv.Nodes) - 1)
		n.spawn(func() {
			defer n.serverBusy.Store(false)
			leader, err := n.r.srv.Etcd.WaitLeader(10 * time.Second)
			if err != nil {
				n.r.problem("find the leader before a member fault: %v", err)
				return
			}
			i := pick
			if i >= leader {
				i++ // a follower: every member but the leader
			}
			name := fmt.Sprintf("member %d (follower; leader %d) %s for %v", i, leader, what, d.Round(time.Millisecond))
			n.r.witness(name, func() {
				end := n.r.rec.FaultStart(Fault{Kind: "member-" + map[string]string{"frozen": "freeze", "cut off": "cut", "slowed": "slow"}[what],
					Target: fmt.Sprintf("member %d %v", i, d.Round(time.Millisecond))})
				defer end()
				n.r.note("member %d (follower; leader %d) %s at %v for %v", i, leader, what, n.r.sinceBegin(), d.Round(time.Millisecond))
				do(i, d)
			})
		})
		return true
	}
}

func (n *nemesis) memberFreeze(i int, d time.Duration) {
	node := n.r.srv.Nodes[i]
	if err := node.Pause(); err != nil {
		n.r.problem("pause member %d: %v", i, err)
	}
	n.sleep(d)
	if err := node.Resume(); err != nil {
		n.r.problem("resume member %d: %v", i, err)
	}
}

func (n *nemesis) memberCut(i int, d time.Duration) {
	ps := n.r.envProxiesFor(i)
	for _, p := range ps {
		p.Partition()
	}
	n.sleep(d)
	healProxies(ps)
}

func (n *nemesis) memberSlow(i int, d time.Duration) {
	ps := n.r.envProxiesFor(i)
	req, rep := n.between(50*time.Millisecond, 700*time.Millisecond), n.between(50*time.Millisecond, 700*time.Millisecond)
	for _, p := range ps {
		p.Delay(req, rep)
	}
	n.sleep(d)
	for _, p := range ps {
		p.Delay(0, 0)
	}
}
