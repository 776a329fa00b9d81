package nemesis

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
)

// Delays, apart by kind of connection, and late grants. A client's
// command connections and its pub/sub connections (a Redis driver's
// waiters hear of releases on the latter) are slowed separately, past the
// leases' TTLs, so that grants expire while their replies, or the
// messages that hand a key over, are on their way; and the reply of a
// grant, or of a queued waiter's step, is held past the grant's validity
// (lock then refreshes the late grant, finds it gone, and waits again).
// handover-late does both at once to one client: a release hands the key
// to one of its waiters, whose message comes late; the waiter's own step
// finds the key its own, but its reply comes after the grant expired; the
// waiter waits again, and the old message comes in the meantime.

// delayKinds adds the delays and late replies the target allows.
func (n *nemesis) delayKinds(add func(name string, w int, inject func() bool)) {
	add("delay-commands", 3, n.delayCommands)
	add("grant-held", 2, n.grantHeld)
	if n.r.tg.Notify {
		add("delay-pubsub", 3, n.delayPubSub)
		add("handover-late", 5, n.handoverLate)
	}
	n.blpopKinds(add)  // faults_blpop.go
	n.aclKinds(add)    // faults_acl.go
	n.listenKinds(add) // faults_listen.go
	if n.r.tg.Backend == chaos.EtcdBackend {
		add("keepalive-held", 2, n.keepAliveHeld)
	}
	if n.r.tg.Notify && n.r.tg.Backend == chaos.PostgresBackend {
		add("lost-notify", 2, n.lostNotify)
	}
}

// matcher is the requests of class: "any" (every mutating request), or a
// kind of classify's, "grant" taking a queued waiter's step ("wait",
// "wait-grant") too, "wait" a step that grants ("wait-grant").
func (r *run) matcher(class string) func(chaos.Request) bool {
	return func(q chaos.Request) bool {
		if class == "any" {
			return q.Mutating
		}
		if r.tg.classify == nil {
			return false
		}
		if class == "keepalive" {
			return q.Cmd == "LeaseKeepAlive"
		}
		c := r.tg.classify(q)
		return c == class || class == "grant" && strings.HasPrefix(c, "wait") || class == "wait" && c == "wait-grant"
	}
}

// grantsStep reports whether reply is a queued waiter's grant: the reply
// of a rediswatch transaction that takes the key from the queue, of a
// redisnx wait.lua that granted ({1, token}: an array of two integers,
// the first 1), or of a PostgreSQL check_turn whose row has a token
// (its first column) above 0.
func (r *run) grantsStep(q chaos.Request, reply []byte) bool {
	switch r.tg.classify(q) {
	case "wait-grant":
		return true
	case "wait":
		if r.tg.Backend == chaos.PostgresBackend {
			rows := chaos.PostgresRows(reply)
			if len(rows) != 1 || len(rows[0]) == 0 {
				return false
			}
			tok, ok := chaos.PostgresInt(rows[0][0])
			return ok && tok > 0
		}
		return bytes.HasPrefix(reply, []byte("*2\r\n:1\r\n"))
	}
	return false
}

// armHold makes the proxies hold the replies of the next n requests of
// class (those reply accepts, if not nil) for d, then deliver them; stop
// disarms. They are recorded as held-reply faults (with the requests), as
// lost replies are.
func (r *run) armHold(ps []*chaos.Proxy, slot, class string, n int, d time.Duration, reply func(chaos.Request, []byte) bool) func() {
	a := &dropArm{kind: "held-reply", slot: slot, class: fmt.Sprintf("%s, %v", class, d.Round(time.Millisecond))}
	for _, p := range ps {
		a.rules = append(a.rules, p.HoldReplies(r.matcher(class), n, d, reply))
	}
	r.dropMu.Lock()
	r.drops = append(r.drops, a)
	r.dropMu.Unlock()
	return a.stop
}

// ttlRange is the shortest and longest TTL the workers lock with.
func (n *nemesis) ttlRange() (time.Duration, time.Duration) {
	return slices.Min(n.r.tg.LockTTLs), slices.Max(n.r.tg.LockTTLs)
}

// slowest is how late a reply may come: past the shorter leases' TTLs,
// below the clients' read timeouts (go-redis's 3s).
func (n *nemesis) slowest() time.Duration {
	if !n.r.tg.Notify {
		return 800 * time.Millisecond
	}
	_, hi := n.ttlRange()
	return min(hi/2+500*time.Millisecond, 2500*time.Millisecond)
}

// delayCommands slows one client's command connections (its pub/sub ones
// are left alone): replies come up to slowest late, past some leases'
// deadlines (a refresh then answers after its lease ended).
func (n *nemesis) delayCommands() bool {
	s := pick(n.rng, n.clientSlots())
	req, rep := n.between(0, 100*time.Millisecond), n.between(20*time.Millisecond, n.slowest())
	d := n.between(500*time.Millisecond, 3*time.Second)
	if !s.delays.CompareAndSwap(false, true) {
		return false
	}
	n.spawn(func() {
		defer s.delays.Store(false)
		end := n.r.rec.FaultStart(Fault{Kind: "delay-commands", Target: fmt.Sprintf("%s %v/%v", s.name, req.Round(time.Millisecond), rep.Round(time.Millisecond))})
		for _, p := range s.proxies {
			p.DelayCommands(req, rep)
		}
		n.sleep(d)
		for _, p := range s.proxies {
			p.DelayCommands(0, 0)
		}
		end()
	})
	return true
}

// delayPubSub holds the messages of one client's pub/sub connections for
// a while (up to 2.5s, past the TTLs of the leases they hand over), then
// delivers them in order; its commands are answered at once.
func (n *nemesis) delayPubSub() bool {
	s := pick(n.rng, n.clientSlots())
	rep := n.between(100*time.Millisecond, 2500*time.Millisecond)
	d := n.between(time.Second, 5*time.Second)
	if !s.psDelays.CompareAndSwap(false, true) {
		return false
	}
	n.spawn(func() {
		defer s.psDelays.Store(false)
		end := n.r.rec.FaultStart(Fault{Kind: "delay-pubsub", Target: fmt.Sprintf("%s %v", s.name, rep.Round(time.Millisecond))})
		n.pubsubDelay(s, rep, d)
		end()
	})
	return true
}

// pubsubDelay delays s's pub/sub messages by rep for d.
func (n *nemesis) pubsubDelay(s clientSlot, rep, d time.Duration) {
	for _, p := range s.proxies {
		p.DelayPubSub(rep)
	}
	n.sleep(d)
	for _, p := range s.proxies {
		p.DelayPubSub(0)
	}
}

// grantHeld holds the replies of one client's next one to three grants
// (or queued waiters' steps) for longer than the shorter leases' TTLs:
// they reach lock after the validity they count on.
func (n *nemesis) grantHeld() bool {
	s := pick(n.rng, n.clientSlots())
	class := pick(n.rng, []string{"grant", "wait"})
	if !n.r.tg.Notify {
		class = "grant"
	}
	lo, hi := n.ttlRange()
	hold := n.between(lo, min(hi, 2500*time.Millisecond)+time.Millisecond)
	count := 1 + n.rng.IntN(3)
	d := n.between(500*time.Millisecond, 3*time.Second)
	n.spawn(func() {
		stop := n.r.armHold(s.proxies, s.name, class, count, hold, nil)
		n.sleep(d)
		stop()
	})
	return true
}

// handoverLate makes a release's hand-over message reach one client's
// waiters late while the replies of their own steps are held past the
// grant's validity: the messages come after the waiter gave its late
// grant up and waited again.
func (n *nemesis) handoverLate() bool {
	s := pick(n.rng, n.clientSlots())
	lo, _ := n.ttlRange()
	hold := n.between(max(lo, time.Second), 2500*time.Millisecond)
	late := hold + n.between(100*time.Millisecond, 1200*time.Millisecond)
	count := 1 + n.rng.IntN(4)
	d := n.between(3*time.Second, 7*time.Second)
	if !s.psDelays.CompareAndSwap(false, true) {
		return false
	}
	n.spawn(func() {
		defer s.psDelays.Store(false)
		end := n.r.rec.FaultStart(Fault{Kind: "handover-late", Target: fmt.Sprintf("%s steps %v, messages %v", s.name, hold.Round(time.Millisecond), late.Round(time.Millisecond))})
		stop := n.r.armHold(s.proxies, s.name, "wait", count, hold, n.r.grantsStep)
		n.pubsubDelay(s, late, d)
		stop()
		end()
	})
	return true
}

// lostNotify loses the next one to five notifications of one client's
// LISTEN connections (PostgreSQL), which stay up: a notification only
// wakes, so the waiter it was for finds its turn at its next step, a
// heartbeat later at most. It is recorded as a fault once one was lost.
func (n *nemesis) lostNotify() bool {
	s := pick(n.rng, n.clientSlots())
	count := 1 + n.rng.IntN(5)
	d := n.between(time.Second, 5*time.Second)
	n.spawn(func() {
		a := &dropArm{kind: "lost-notify", slot: s.name, class: "notify"}
		for _, p := range s.proxies {
			a.rules = append(a.rules, p.DropPushes(count))
		}
		n.r.dropMu.Lock()
		n.r.drops = append(n.r.drops, a)
		n.r.dropMu.Unlock()
		n.sleep(d)
		a.stop()
	})
	return true
}

// keepAliveHeld holds the replies of one client's next keep-alive
// messages (etcd's LeaseKeepAlive stream) for up to 2.5s, past the
// shorter leases' TTLs: etcd renewed the lease on time, the client hears
// of it late (and every frame behind the held one on that member's
// connection waits too, as on the real stream).
func (n *nemesis) keepAliveHeld() bool {
	s := pick(n.rng, n.clientSlots())
	hold := n.between(300*time.Millisecond, 2500*time.Millisecond)
	count := 1 + n.rng.IntN(5)
	d := n.between(time.Second, 4*time.Second)
	n.spawn(func() {
		stop := n.r.armHold(s.proxies, s.name, "keepalive", count, hold, nil)
		n.sleep(d)
		stop()
	})
	return true
}
