package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// nemesis injects faults at random moments, overlapping, in phases: a few
// seconds of faults, then a quiet spell long enough for the backend to
// recover and for the liveness probe to be judged. Its choices and
// timings come from its own random stream of the seed.
type nemesis struct {
	r    *run
	rng  *rand.Rand
	stop chan struct{}
	wg   sync.WaitGroup // the loop

	faults     sync.WaitGroup // faults under way
	active     atomic.Int32
	serverBusy atomic.Bool

	injectedMu sync.Mutex
	injected   map[string]int // by kind: how many times inject started one
	// allBy is how long into the run the last kind not injected yet was
	// injected (0 until every kind was) of the nKinds the loop may pick.
	allBy  time.Duration
	nKinds int
}

// maxActive bounds the faults under way at once.
const maxActive = 3

// fault is one kind of fault: weight, and inject, which returns false if
// it cannot be injected now (its target is busy).
type fault struct {
	name   string
	weight int
	inject func() bool
	// server: the fault takes the server (serverBusy), one such at a
	// time.
	server bool
}

func (n *nemesis) between(lo, hi time.Duration) time.Duration { return between(n.rng, lo, hi) }

func (n *nemesis) sleep(d time.Duration) { sleepOrStop(d, n.stop) }

func (n *nemesis) stopped() bool { return closed(n.stop) }

// loop injects faults until end.
func (n *nemesis) loop(end time.Time) {
	kinds := n.only(n.kinds())
	n.injectedMu.Lock()
	n.nKinds = len(kinds)
	n.injectedMu.Unlock()
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	begun := time.Now()
	n.sleep(500 * time.Millisecond)
	for !n.stopped() && time.Now().Before(end) {
		phase := time.Now().Add(n.between(4*time.Second, 8*time.Second))
		for !n.stopped() && time.Now().Before(phase) && time.Now().Before(end) {
			n.sleep(n.between(100*time.Millisecond, 1200*time.Millisecond))
			if n.stopped() {
				continue
			}
			full := n.active.Load() >= maxActive
			if n.r.tg.AllFaults && time.Since(begun) >= owedFaultsAfter && n.injectDue(kinds, full) {
				continue
			}
			if full {
				continue
			}
			for range 5 { // a busy target: pick another
				if n.try(n.choose(kinds, total)) {
					break
				}
			}
		}
		n.sleep(n.between(n.r.tg.Recovery+time.Second, n.r.tg.Recovery+3*time.Second))
	}
	n.faults.Wait()
}

// try injects k, and counts it if it started.
func (n *nemesis) try(k fault) bool {
	if !k.inject() {
		return false
	}
	n.injectedMu.Lock()
	defer n.injectedMu.Unlock()
	if n.injected[k.name]++; n.injected[k.name] == 1 && n.r != nil && len(n.injected) == n.nKinds {
		n.allBy = time.Since(n.r.begin)
	}
	return true
}

// AllInjectedBy is how long into the run every kind of fault the run may
// pick had been injected, or 0 if some never was.
func (n *nemesis) AllInjectedBy() time.Duration {
	n.injectedMu.Lock()
	defer n.injectedMu.Unlock()
	return n.allBy
}

// injectDue tries, for a target that declares AllFaults once the first
// phase is over, the kinds not injected yet: those that take the server
// first, then the others, each group in an order drawn by weight; it
// reports whether one started. With full (maxActive faults under way)
// only the server's are tried. Server faults run one at a time and last
// long (leader-loss up to twice the target's Bound, and an election),
// so a kind that takes the server gets it as soon as it is free, before
// any other kind of server fault: otherwise a 60 s run of etcd-cluster,
// with four kinds of server fault, could end without one of them (it
// did: no leader-loss). A due server fault may so make maxActive+1.
func (n *nemesis) injectDue(kinds []fault, full bool) bool {
	n.injectedMu.Lock()
	var server, other []fault
	for _, k := range kinds {
		switch {
		case n.injected[k.name] > 0:
		case k.server:
			server = append(server, k)
		case !full:
			other = append(other, k)
		}
	}
	n.injectedMu.Unlock()
	for _, group := range [][]fault{server, other} {
		for len(group) > 0 {
			total := 0
			for _, k := range group {
				total += k.weight
			}
			k := n.choose(group, total)
			if n.try(k) {
				return true
			}
			group = slices.DeleteFunc(group, func(x fault) bool { return x.name == k.name })
		}
	}
	return false
}

// choose picks a kind of fault by weight.
func (n *nemesis) choose(kinds []fault, total int) fault {
	x := n.rng.IntN(total)
	for _, k := range kinds {
		if x < k.weight {
			return k
		}
		x -= k.weight
	}
	return kinds[len(kinds)-1]
}

// kindNames are the names of the kinds of fault the run may inject.
func (n *nemesis) kindNames() []string {
	var out []string
	for _, k := range n.only(n.kinds()) {
		out = append(out, k.name)
	}
	return out
}

// Injected returns how many faults of each kind were started.
func (n *nemesis) Injected() map[string]int {
	n.injectedMu.Lock()
	defer n.injectedMu.Unlock()
	out := map[string]int{}
	for k, v := range n.injected {
		out[k] = v
	}
	return out
}

// spawn runs a fault in the background.
func (n *nemesis) spawn(f func()) {
	n.active.Add(1)
	n.faults.Add(1)
	go func() {
		defer n.faults.Done()
		defer n.active.Add(-1)
		f()
	}()
}

// kinds are the faults the target's backend and load allow.
func (n *nemesis) kinds() []fault {
	r := n.r
	var ks []fault
	add := func(name string, w int, inject func() bool) {
		ks = append(ks, fault{name: name, weight: w, inject: inject})
	}
	// addServer adds a kind that takes the server (serverBusy).
	addServer := func(name string, w int, inject func() bool) {
		ks = append(ks, fault{name: name, weight: w, inject: inject, server: true})
	}
	add("churn", 3, n.churn)
	add("stall", 2, n.stall)
	if r.srv == nil {
		add("state-loss", 1, n.memoryStateLoss)
		add("counter-loss", 1, n.memoryCounterLoss)
		add("witness", 1, n.quietWitness)
		return ks
	}
	add("lost-reply", 4, n.dropReplies)
	add("partition", 3, n.partition)
	n.delayKinds(add)
	n.laneKinds(add)
	if r.tg.members {
		n.memberFaults(addServer)
		return append(ks, n.childKinds()...)
	}
	addServer("server-pause", 3, n.serverPause)
	if r.bouncer != nil {
		addServer("bouncer-restart", 3, n.bouncerRestart)
	}
	switch {
	case r.srv.ZK != nil && len(r.srv.Nodes) > 1: // an ensemble
		addServer("leader-loss", 3, n.leaderLoss)
		addServer("node-pause", 2, n.nodePause)
	case r.srv.Etcd != nil && len(r.srv.Nodes) > 1: // an etcd cluster
		addServer("leader-loss", 3, n.leaderLoss)
		addServer("node-pause", 2, n.nodePause)
		addServer("node-restart", 2, n.nodeRestart(false))
	case r.tg.cluster:
		// Restarting the whole cluster waits for each node to serve the
		// cluster, which it cannot alone: one node at a time.
		addServer("node-pause", 2, n.nodePause)
		addServer("node-restart", 2, n.nodeRestart(false))
		if r.wipe != nil {
			addServer("node-restart-volatile", 1, n.nodeRestart(true))
		}
	default:
		if r.tg.Backend != chaos.MemcachedBackend {
			addServer("server-restart", 2, n.serverRestart(false))
		}
		if r.tg.Backend == chaos.MemcachedBackend || r.wipe != nil {
			addServer("server-restart-volatile", 1, n.serverRestart(true))
		}
	}
	return append(ks, n.childKinds()...)
}

// childKinds are the faults of the child processes, if any.
func (n *nemesis) childKinds() []fault {
	if len(n.r.children) == 0 {
		return nil
	}
	return []fault{{name: "child-freeze", weight: 2, inject: n.childFreeze}, {name: "child-kill", weight: 1, inject: n.childKill}}
}

// clientSlot is a slot with proxies: one of the test process's, or a
// child's.
type clientSlot struct {
	name     string
	proxies  []*chaos.Proxy
	busy     *atomic.Bool
	delays   *atomic.Bool // its command connections are delayed
	psDelays *atomic.Bool // its pub/sub connections are delayed
}

func (n *nemesis) clientSlots() []clientSlot {
	var out []clientSlot
	for _, s := range n.r.slots {
		out = append(out, clientSlot{s.name, s.proxies, &s.busy, &s.delays, &s.psDelays})
	}
	for _, c := range n.r.children {
		out = append(out, clientSlot{c.name, c.proxies, &c.busy, &c.delays, &c.psDelays})
	}
	return out
}

// dropReplies loses the replies of the next one to three requests of a
// kind (grant, release, refresh, or any write) on one client's proxy.
func (n *nemesis) dropReplies() bool {
	ss := n.clientSlots()
	s := ss[n.rng.IntN(len(ss))]
	class := pick(n.rng, []string{"grant", "release", "refresh", "refresh", "any"})
	count := 1 + n.rng.IntN(6) // 4 and more defeat go-redis's retries
	d := n.between(200*time.Millisecond, 3*time.Second)
	n.spawn(func() {
		stop := n.r.armDrop(s.proxies, s.name, class, count)
		n.sleep(d)
		stop()
	})
	return true
}

// shortOrLong is a duration under half the bound, or between the bound
// and twice it (past every lease's deadline).
func (n *nemesis) shortOrLong() (time.Duration, bool) {
	b := n.r.tg.Bound
	if n.rng.IntN(2) == 0 {
		return n.between(100*time.Millisecond, b/2), false
	}
	return n.between(b, 2*b), true
}

// partition cuts one client off for a while: past its leases' deadlines
// (for ZooKeeper, past its session: the server expires it), or not.
func (n *nemesis) partition() bool {
	ss := n.clientSlots()
	s := ss[n.rng.IntN(len(ss))]
	if !s.busy.CompareAndSwap(false, true) {
		return false
	}
	d, long := n.shortOrLong()
	kind := "partition"
	if long && n.r.tg.Backend == chaos.ZooKeeperBackend {
		kind = "session-expiry"
		d = n.between(Session+time.Second, 2*Session+time.Second)
	}
	n.spawn(func() {
		defer s.busy.Store(false)
		end := n.r.rec.FaultStart(Fault{Kind: kind, Target: s.name})
		for _, p := range s.proxies {
			p.Partition()
		}
		n.sleep(d)
		healProxies(s.proxies)
		end()
	})
	return true
}

// serverPause freezes the server (SIGSTOP) for a while.
func (n *nemesis) serverPause() bool {
	if !n.serverBusy.CompareAndSwap(false, true) {
		return false
	}
	d, _ := n.shortOrLong()
	n.spawn(func() {
		defer n.serverBusy.Store(false)
		end := n.r.rec.FaultStart(Fault{Kind: "server-pause", Target: d.Round(time.Millisecond).String(), Server: true})
		if err := n.r.srv.Pause(); err != nil {
			n.r.problem("pause the server: %v", err)
		}
		n.sleep(d)
		if err := n.r.srv.Resume(); err != nil {
			n.r.problem("resume the server: %v", err)
		}
		end()
	})
	return true
}

// serverRestart kills the server and starts it again after a while, with
// its data (AOF, ZooKeeper's log) or without (volatile: memcached, or
// Redis with its files removed): the backend then forgets every grant.
func (n *nemesis) serverRestart(volatile bool) func() bool {
	return func() bool {
		if !n.serverBusy.CompareAndSwap(false, true) {
			return false
		}
		down := n.between(50*time.Millisecond, n.r.tg.Bound)
		if n.rng.IntN(4) == 0 {
			down = n.between(n.r.tg.Bound, 2*n.r.tg.Bound)
		}
		kind := "server-restart"
		if volatile {
			kind, down = "server-restart-volatile", n.between(50*time.Millisecond, time.Second)
		}
		n.spawn(func() {
			defer n.serverBusy.Store(false)
			end := n.r.rec.FaultStart(Fault{Kind: kind, Target: "down " + down.Round(time.Millisecond).String(), Server: true, StateLoss: volatile})
			defer end()
			if err := n.r.srv.Kill(); err != nil {
				n.r.problem("kill the server: %v", err)
			}
			for _, w := range n.r.wipe {
				if !volatile {
					break
				}
				if err := w(); err != nil {
					n.r.problem("remove the server's data: %v", err)
				}
			}
			n.sleep(down)
			n.r.retry("restart the server", n.r.srv.Restart)
		})
		return true
	}
}

// leaderGroup is a group with a leader: a ZooKeeper ensemble, an etcd
// cluster.
type leaderGroup interface {
	KillLeader() (int, error)
	WaitLeader(timeout time.Duration) (int, error)
	Node(i int) *testserver.Server
}

// leaderLoss kills the ensemble's (or cluster's) leader; the others elect a new one; the
// old leader comes back a while later.
func (n *nemesis) leaderLoss() bool {
	if !n.serverBusy.CompareAndSwap(false, true) {
		return false
	}
	down := n.between(Session/2, 2*n.r.tg.Bound)
	n.spawn(func() {
		defer n.serverBusy.Store(false)
		var z leaderGroup = n.r.srv.ZK
		if n.r.srv.Etcd != nil {
			z = n.r.srv.Etcd
		}
		end := n.r.rec.FaultStart(Fault{Kind: "leader-loss", Target: "down " + down.Round(time.Millisecond).String(), Server: true})
		defer end()
		i, err := z.KillLeader()
		if err != nil {
			n.r.problem("kill the leader: %v", err)
			return
		}
		if _, err := z.WaitLeader(30 * time.Second); err != nil {
			n.r.problem("no new leader: %v", err)
		}
		n.sleep(down)
		n.r.retry("restart the old leader", z.Node(i).Restart)
	})
	return true
}

// nodePause freezes one server of a group for a while: an ensemble's
// clients move to another; a cluster's keys on it are out of reach.
func (n *nemesis) nodePause() bool {
	if !n.serverBusy.CompareAndSwap(false, true) {
		return false
	}
	i := n.rng.IntN(len(n.r.srv.Nodes))
	node := n.r.srv.Nodes[i]
	d, _ := n.shortOrLong()
	n.spawn(func() {
		defer n.serverBusy.Store(false)
		end := n.r.rec.FaultStart(Fault{Kind: "node-pause", Target: fmt.Sprintf("node %d %v", i, d.Round(time.Millisecond)), Server: true})
		defer end()
		if err := node.Pause(); err != nil {
			n.r.problem("pause node %d: %v", i, err)
		}
		n.sleep(d)
		if err := node.Resume(); err != nil {
			n.r.problem("resume node %d: %v", i, err)
		}
	})
	return true
}

// nodeRestart kills one node of a Redis Cluster and starts it again after
// a while, with its data or, volatile, without (its keys' grants are
// forgotten).
func (n *nemesis) nodeRestart(volatile bool) func() bool {
	return func() bool {
		if !n.serverBusy.CompareAndSwap(false, true) {
			return false
		}
		i := n.rng.IntN(len(n.r.srv.Nodes))
		node := n.r.srv.Nodes[i]
		down := n.between(50*time.Millisecond, n.r.tg.Bound)
		kind := "node-restart"
		if volatile {
			kind, down = "node-restart-volatile", n.between(50*time.Millisecond, time.Second)
		}
		n.spawn(func() {
			defer n.serverBusy.Store(false)
			end := n.r.rec.FaultStart(Fault{Kind: kind, Target: fmt.Sprintf("node %d down %v", i, down.Round(time.Millisecond)), Server: true, StateLoss: volatile})
			defer end()
			if err := node.Kill(); err != nil {
				n.r.problem("kill node %d: %v", i, err)
			}
			if volatile {
				if err := n.r.wipe[i](); err != nil {
					n.r.problem("remove node %d's data: %v", i, err)
				}
			}
			n.sleep(down)
			n.r.retry(fmt.Sprintf("restart node %d", i), node.Restart)
		})
		return true
	}
}

// childFreeze freezes a child process (SIGSTOP) for a while, often past
// its leases' deadlines.
func (n *nemesis) childFreeze() bool {
	c := n.r.children[n.rng.IntN(len(n.r.children))]
	if !c.busy.CompareAndSwap(false, true) {
		return false
	}
	d := n.between(100*time.Millisecond, 2*n.r.tg.Bound)
	n.spawn(func() {
		defer c.busy.Store(false)
		c.freeze(d, n.stop)
	})
	return true
}

// childKill kills a child process (SIGKILL) and starts another.
func (n *nemesis) childKill() bool {
	c := n.r.children[n.rng.IntN(len(n.r.children))]
	if !c.busy.CompareAndSwap(false, true) {
		return false
	}
	after := n.between(100*time.Millisecond, time.Second)
	n.spawn(func() {
		defer c.busy.Store(false)
		c.kill(after, n.stop)
	})
	return true
}

// churn closes a Locker under load, half of the time with its client
// partitioned (its releases fail), and opens a new one in its place.
func (n *nemesis) churn() bool {
	partition := n.r.srv != nil && n.rng.IntN(2) == 0
	kind := "churn"
	if partition {
		kind = "churn-partitioned"
	}
	i := n.rng.IntN(len(n.r.slots) + len(n.r.children))
	if i < len(n.r.slots) {
		s := n.r.slots[i]
		if !s.busy.CompareAndSwap(false, true) {
			return false
		}
		n.spawn(func() {
			defer s.busy.Store(false)
			end := n.r.rec.FaultStart(Fault{Kind: kind, Target: s.name})
			s.churn(partition)
			end()
		})
		return true
	}
	c := n.r.children[i-len(n.r.slots)]
	if !c.busy.CompareAndSwap(false, true) {
		return false
	}
	n.spawn(func() {
		defer c.busy.Store(false)
		proc, _, _ := c.current()
		end := n.r.rec.FaultStart(Fault{Kind: kind, Target: proc})
		c.churn(partition)
		end()
	})
	return true
}

// stall makes a holder of the test process pause between its check of
// the lease and its next write, often past the lease's deadline (as a GC
// pause would): fencing must refuse the write if the key changed hands.
func (n *nemesis) stall() bool {
	s := n.r.slots[n.rng.IntN(len(n.r.slots))]
	d := n.between(n.r.tg.Bound/2, 2*n.r.tg.Bound)
	n.r.rec.Fault(Fault{Kind: "stall", Target: fmt.Sprintf("%s %v", s.name, d.Round(time.Millisecond))})
	s.stall.Store(int64(d))
	return true
}

// memoryStateLoss makes the memory store forget the hot keys' and the set
// keys' grants and waiters, as a restart without persistence would.
func (n *nemesis) memoryStateLoss() bool {
	n.r.rec.Fault(Fault{Kind: "state-loss", Target: "memory store", StateLoss: true})
	for _, k := range append(slices.Clone(n.r.env.keys), setKeys()...) {
		n.r.store.DeleteKey(k)
	}
	return true
}

// memoryCounterLoss makes the memory store forget the hot keys' and the
// set keys' fencing counters: tokens must go on increasing.
func (n *nemesis) memoryCounterLoss() bool {
	n.r.rec.Fault(Fault{Kind: "counter-loss", Target: "memory store"})
	for _, k := range append(slices.Clone(n.r.env.keys), setKeys()...) {
		n.r.store.DeleteCounter(k)
	}
	return true
}
