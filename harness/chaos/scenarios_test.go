package chaos

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// The scenarios, each a fault injected for real with a fixed choreography,
// so that what a broken algorithm would do wrong happens every time, not
// by luck. Holders: A is the one the fault hits; B is granted the key once
// A's grant is gone; C tries while B holds (a correct lock refuses it).
var scenarios = []*scenario{
	{name: "holder-pause/mid-write", short: true, run: holderPauseMidWrite},
	{name: "holder-pause/mid-release", short: true, run: holderPauseMidRelease},
	{name: "holder-kill", short: true, run: holderKill},
	{name: "server-pause/short", run: serverPause(false)},
	{name: "server-pause/long", short: true, run: serverPause(true)},
	{name: "lost-reply/grant", short: true, run: lostGrantReply},
	{name: "lost-reply/release", short: true, run: lostReleaseReply},
	{name: "lost-reply/refresh", short: true, run: lostRefreshReply},
	{name: "partition", short: true, run: partition},
	{name: "server-restart/volatile", backends: []Backend{RedisBackend, MemcachedBackend}, short: true, run: restartVolatile},
	{name: "server-restart/persistent", backends: []Backend{RedisBackend, ZooKeeperBackend, PostgresBackend}, server: ServerOptions{Persistence: true}, run: restartPersistent(false)},
	{name: "server-restart/persistent-long", backends: []Backend{RedisBackend, ZooKeeperBackend, PostgresBackend}, server: ServerOptions{Persistence: true}, short: true, run: restartPersistent(true)},
	{name: "server-restart/unlock-in-outage", backends: []Backend{RedisBackend, ZooKeeperBackend, PostgresBackend}, server: ServerOptions{Persistence: true}, short: true, run: unlockInOutage},
	{name: "zk/session-expiry", backends: []Backend{ZooKeeperBackend}, short: true, run: zkSessionExpiry},
	{name: "zk/leader-loss", backends: []Backend{ZooKeeperBackend}, server: ServerOptions{Ensemble: true}, short: true, run: zkLeaderLoss},
	{name: "postgres/lost-wakeup", backends: []Backend{PostgresBackend}, short: true, run: pgLostWakeup},
	{name: "memcached/eviction", backends: []Backend{MemcachedBackend}, server: ServerOptions{MemoryMB: fillMemoryMB}, short: true, run: memcachedEviction},
	{name: "memcached/eviction-noevict", backends: []Backend{MemcachedBackend}, server: ServerOptions{MemoryMB: fillMemoryMB, NoEvict: true}, run: memcachedNoEvict},
}

func scenarioByName(name string) *scenario {
	for _, s := range scenarios {
		if s.name == name {
			return s
		}
	}
	return nil
}

// TestFaults runs every scenario against every driver (make chaos), or
// the short selection (go test, make test).
func TestFaults(t *testing.T) {
	for _, tg := range targets {
		if tg.control {
			continue
		}
		t.Run(tg.name, func(t *testing.T) {
			for _, sc := range scenarios {
				if sc.appliesTo(tg.backend) && (sc.short || fullMode()) {
					t.Run(sc.name, func(t *testing.T) { run(t, tg, sc) })
				}
			}
		})
	}
}

// TestControls runs each negative control through the scenarios that must
// catch it (make chaos: through all of its backend's), and fails if the
// checks do not catch it there.
func TestControls(t *testing.T) {
	for _, tg := range targets {
		if !tg.control {
			continue
		}
		if len(tg.catches) == 0 {
			t.Errorf("control %s has no scenario that must catch it", tg.name)
		}
		for name := range tg.catches {
			if sc := scenarioByName(name); sc == nil || !sc.appliesTo(tg.backend) {
				t.Errorf("control %s: no scenario %q for its backend", tg.name, name)
			}
		}
		t.Run(tg.name, func(t *testing.T) {
			for _, sc := range scenarios {
				_, must := tg.catches[sc.name]
				if sc.appliesTo(tg.backend) && (must || fullMode()) {
					t.Run(sc.name, func(t *testing.T) { run(t, tg, sc) })
				}
			}
		})
	}
}

// waitFired waits until an armed action happened.
func (e *env) waitFired(a *arm, d time.Duration, what string) bool {
	select {
	case <-a.fired:
		e.logf("%s", what)
		return true
	case <-time.After(d):
		e.expect(false, "%s: did not happen within %v", what, d)
		return false
	}
}

// cTriesWhileBHolds has C ask for the key for a while B holds it: a
// correct lock refuses C; a broken one that let A delete B's grant lets C
// in, and the checker sees B and C overlap.
func (e *env) cTriesWhileBHolds(c holder) {
	_, err := e.lock(c, LockArgs{Timeout: e.ttl/2 + 300*time.Millisecond})
	if err == nil {
		e.logf("C was granted the key while B held it")
		c.Unlock(5 * time.Second)
	}
}

// holderPauseMidWrite: holder A, a process, is frozen (SIGSTOP) with a
// write decided but not applied, past its TTL; B is granted and writes; A
// resumes and its write lands: fencing must refuse it, A must see Done at
// once, and A's release must leave B's grant alone (C is refused).
func holderPauseMidWrite(e *env) {
	a := e.child("A", e.srv.Addrs)
	b, c := e.inproc("B", e.srv.Addrs), e.inproc("C", e.srv.Addrs)
	e.recoverWith = c
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	if !e.waitFired(e.ps.arm("A", "pause", "write"), 5*time.Second, "A frozen in a write") {
		return
	}
	gb, bok := e.mustLock(b, LockArgs{Timeout: e.bound + 5*time.Second})
	if bok {
		e.expectWrites(gb, b, 1)
	}
	a.resume()
	e.expect(a.WaitDone(WakeBound), "A saw Done within %v of waking", WakeBound)
	a.Close() // A gives up, after its background release
	if bok {
		e.cTriesWhileBHolds(c)
		b.Unlock(5 * time.Second)
	}
	if !e.tg.control {
		rep := Check(e.res.History())
		e.expect(rep.StaleRejected > 0, "A's late write was refused by fencing (stale writes rejected: %d)", rep.StaleRejected)
	}
}

// holderPauseMidRelease: A is frozen inside Unlock (for controls, between
// the steps of their non-atomic release) past its TTL; B is granted; A
// resumes and finishes its release: B's grant must survive (C refused).
func holderPauseMidRelease(e *env) {
	a := e.child("A", e.srv.Addrs)
	b, c := e.inproc("B", e.srv.Addrs), e.inproc("C", e.srv.Addrs)
	e.recoverWith = c
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	point := "unlock"
	if e.tg.hasGap("release-gap") {
		point = "release-gap"
	}
	armed := e.ps.arm("A", "pause", point)
	unlocked := make(chan error, 1)
	go func() { unlocked <- a.Unlock(e.bound + 30*time.Second) }()
	if !e.waitFired(armed, 5*time.Second, "A frozen at "+point) {
		return
	}
	gb, bok := e.mustLock(b, LockArgs{Timeout: e.bound + 5*time.Second})
	if bok {
		e.expectWrites(gb, b, 1)
	}
	a.resume()
	select {
	case err := <-unlocked:
		e.logf("A: Unlock after waking: %s", desc(err))
	case <-time.After(10 * time.Second):
		e.expect(false, "A's Unlock did not return within 10s of waking")
	}
	a.Close()
	if bok {
		e.cTriesWhileBHolds(c)
		b.Unlock(5 * time.Second)
	}
}

// holderKill: A's process is killed (SIGKILL) while holding; controls with
// a non-atomic grant are killed between its steps. B must be granted once
// A's grant expires, and nothing may be left behind.
func holderKill(e *env) {
	a := e.child("A", e.srv.Addrs)
	b := e.inproc("B", e.srv.Addrs)
	e.recoverWith = b
	points := []string{"write"}
	if e.tg.hasGap("acquire-gap") {
		points = []string{"acquire-gap"}
	}
	armed := e.ps.arm("A", "kill", points...)
	locked := a.lockAsync(LockArgs{Key: e.key, Timeout: 10 * time.Second})
	if !e.waitFired(armed, 10*time.Second, "A killed at "+points[0]) {
		return
	}
	<-locked
	e.orphanWait = time.Now().Add(e.bound + time.Second)
	gb, ok := e.mustLock(b, LockArgs{Timeout: e.bound + 3*time.Second})
	if ok {
		e.expectWrites(gb, b, 1)
		b.Unlock(5 * time.Second)
	}
}

// serverPause: the server is frozen (SIGSTOP) for half the bound (A
// should keep its lease) or twice the bound (A must lose it at its local
// deadline, before B is granted after the server wakes).
func serverPause(long bool) func(e *env) {
	return func(e *env) {
		a, b := e.inproc("A", e.srv.Addrs), e.inproc("B", e.srv.Addrs)
		e.recoverWith = a
		ga, ok := e.mustLock(a, LockArgs{})
		if !ok {
			return
		}
		e.expectWrites(ga, a, 2)
		d := e.bound / 2
		if long {
			d = 2 * e.bound
		}
		waiting := e.lockAsync(b, LockArgs{Timeout: d + 3*e.bound + 10*time.Second})
		time.Sleep(100 * time.Millisecond)
		end := e.fault("pause-server", "server")
		e.must(e.srv.Pause(), "pause server")
		time.Sleep(d)
		e.must(e.srv.Resume(), "resume server")
		end()
		if long {
			e.expect(a.WaitDone(time.Second), "A lost its lease while the server was frozen for %v", d)
		} else {
			time.Sleep(e.bound / 2)
			kept := !a.WaitDone(0)
			e.note("A kept its lease through a %v pause: %v", d, kept)
			if kept {
				a.Unlock(5 * time.Second)
			}
		}
		select {
		case r := <-waiting:
			if e.expect(r.err == nil, "B granted after the pause: %s", desc(r.err)) {
				e.expectWrites(r.g, b, 1)
				b.Unlock(5 * time.Second)
			}
		case <-time.After(3*e.bound + 15*time.Second):
			e.expect(false, "B's Lock did not return")
		}
	}
}

// lostGrantReply: the server applies A's grant but the reply is lost (the
// proxy drops it and cuts the connection). Either A's TryLock fails and
// lock's clean-up removes the grant at once (B is granted without waiting
// for a TTL), or the client resends the request and A holds a valid lease
// (B waits for A's Unlock). Nothing may be left behind.
func lostGrantReply(e *env) {
	p := e.proxy(0)
	a, b := e.inproc("A", []string{p.Addr()}), e.inproc("B", e.srv.Addrs)
	e.recoverWith = a
	if _, ok := e.mustLock(a, LockArgs{Try: true, NoRenew: true}); ok { // warm up
		a.Unlock(5 * time.Second)
	}
	rule := p.DropReplies(e.tg.pred(e.tg.grantReq), 1)
	ga, err := e.lock(a, LockArgs{Try: true, NoRenew: true, Timeout: 5 * time.Second})
	rule.Stop()
	if !e.dropped(rule, "grant") {
		return
	}
	if err == nil {
		e.note("A's TryLock succeeded: the client resent the grant after the lost reply")
		e.expectWrites(ga, a, 1)
		e.cTriesWhileAHolds(b)
		a.Unlock(5 * time.Second)
	} else {
		e.lostGrantResidue()
	}
	gb, ok := e.mustLock(b, LockArgs{Timeout: e.bound + 3*time.Second})
	if ok {
		e.expectWrites(gb, b, 1)
		b.Unlock(5 * time.Second)
	}
}

// dropped waits for rule to have lost a reply, and records it as a fault.
func (e *env) dropped(rule *DropRule, what string) bool {
	select {
	case req := <-rule.Dropped():
		e.res.FaultStart("lost-reply", req.Name())()
		e.note("lost the reply of %s (%s)", req.Name(), what)
		return true
	case <-time.After(e.bound + time.Second):
		e.expect(false, "no %s reply was lost", what)
		return false
	}
}

// lostGrantResidue records, as orphans, grants left after a failed grant
// (lock releases them by owner, waiting at most a second).
func (e *env) lostGrantResidue() {
	deadline := time.Now().Add(1500 * time.Millisecond)
	for {
		found := e.residueNow()
		if len(found) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, f := range found {
				e.orphans = append(e.orphans, "left by the grant whose reply was lost: "+f)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lostReleaseReply: the server applies A's release but the reply is lost.
// A's Unlock fails (not with ErrNotHeld: the outcome is unknown) or, if the
// client resent the release, says ErrNotHeld (its first run deleted the
// grant); B is granted at once; a retried Unlock says ErrNotHeld and leaves
// B's grant alone (C is refused).
func lostReleaseReply(e *env) {
	p := e.proxy(0)
	a := e.inproc("A", []string{p.Addr()})
	b, c := e.inproc("B", e.srv.Addrs), e.inproc("C", e.srv.Addrs)
	e.recoverWith = a
	if _, ok := e.mustLock(a, LockArgs{Try: true, NoRenew: true}); ok { // warm up
		a.Unlock(5 * time.Second)
	}
	ga, ok := e.mustLock(a, LockArgs{NoRenew: true})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	rule := p.DropReplies(e.tg.pred(e.tg.releaseReq), 1)
	err := a.Unlock(5 * time.Second)
	rule.Stop()
	if !e.dropped(rule, "release") {
		return
	}
	e.note("A's Unlock: %s", desc(err))
	e.expect(err != nil, "A's Unlock failed when its reply was lost")
	retry := err != nil && !errors.Is(err, lock.ErrNotHeld)
	gb, bok := e.mustLock(b, LockArgs{Timeout: e.bound/2 + 500*time.Millisecond})
	if !bok {
		return
	}
	e.expectWrites(gb, b, 1)
	if retry {
		err = a.Unlock(5 * time.Second)
		e.expect(errors.Is(err, lock.ErrNotHeld), "A's second Unlock: want ErrNotHeld, got %s", desc(err))
	}
	e.cTriesWhileBHolds(c)
	b.Unlock(5 * time.Second)
}

// lostRefreshReply: the server applies A's refresh but the reply is lost:
// once (A retries and keeps its lease), then every time (A must lose its
// lease at its local deadline although the server kept extending it, and
// B is granted only after that).
func lostRefreshReply(e *env) {
	p := e.proxy(0)
	a := e.inproc("A", []string{p.Addr()})
	b, c := e.inproc("B", e.srv.Addrs), e.inproc("C", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	rule := p.DropReplies(e.tg.pred(e.tg.refreshReq), 1)
	if !e.dropped(rule, "refresh") {
		return
	}
	rule.Stop()
	time.Sleep(e.bound)
	e.expect(!a.WaitDone(0), "A kept its lease after one lost refresh reply")
	e.cTriesWhileAHolds(c)

	all := p.DropReplies(e.tg.pred(e.tg.refreshReq), -1)
	end := e.fault("lost-refresh-replies", "A")
	defer func() { all.Stop(); end() }()
	waiting := e.lockAsync(b, LockArgs{Timeout: 3*e.bound + 10*time.Second})
	e.expect(a.WaitDone(e.bound+time.Second), "A lost its lease within %v of losing every refresh reply", e.bound+time.Second)
	select {
	case r := <-waiting:
		if e.expect(r.err == nil, "B granted: %s", desc(r.err)) {
			e.expectWrites(r.g, b, 1)
			b.Unlock(5 * time.Second)
		}
	case <-time.After(3*e.bound + 15*time.Second):
		e.expect(false, "B's Lock did not return")
	}
	e.note("%d refresh replies lost in all", 1+len(all.Dropped()))
}

// cTriesWhileAHolds: C must be refused while A holds.
func (e *env) cTriesWhileAHolds(c holder) {
	_, err := e.lock(c, LockArgs{Try: true})
	if err == nil {
		e.logf("C was granted the key while A held it")
		c.Unlock(5 * time.Second)
	}
}

// partition: A is cut off from the server (the proxy drops every byte)
// past its TTL or session timeout, then the network heals. A must see Done
// by its deadline, B be granted only after, and A's Locker work again.
func partition(e *env) {
	p := e.proxy(0)
	a, b := e.inproc("A", []string{p.Addr()}), e.inproc("B", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	waiting := e.lockAsync(b, LockArgs{Timeout: 3*e.bound + 10*time.Second})
	time.Sleep(100 * time.Millisecond)
	end := e.fault("partition", "A")
	p.Partition()
	e.expect(a.WaitDone(e.bound+time.Second), "A lost its lease within %v of the partition", e.bound+time.Second)
	select {
	case r := <-waiting:
		if e.expect(r.err == nil, "B granted during the partition: %s", desc(r.err)) {
			e.expectWrites(r.g, b, 1)
			time.Sleep(200 * time.Millisecond)
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

// restartVolatile: the server is killed and restarted empty (Redis
// without persistence, memcached). The backend forgets A's grant and the
// fencing counter: B may be granted before A hears of it (stated), but
// B's token must exceed A's, so A's late writes are refused, and A must
// see Done at its next refresh.
func restartVolatile(e *env) {
	e.stateLost("restart without persistence")
	a, b := e.inproc("A", e.srv.Addrs), e.inproc("B", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	waiting := e.lockAsync(b, LockArgs{Timeout: e.bound + 15*time.Second})
	time.Sleep(100 * time.Millisecond)
	end := e.fault("kill-restart-server", "server")
	e.must(e.srv.Kill(), "kill server")
	time.Sleep(200 * time.Millisecond)
	e.must(e.srv.Restart(), "restart server")
	end()
	select {
	case r := <-waiting:
		if e.expect(r.err == nil, "B granted after the restart: %s", desc(r.err)) {
			e.expectWrites(r.g, b, 1)
			e.expect(a.WaitDone(e.bound+time.Second), "A saw Done within %v of the restart", e.bound+time.Second)
			b.Unlock(5 * time.Second)
		}
	case <-time.After(e.bound + 20*time.Second):
		e.expect(false, "B's Lock did not return")
	}
}

// restartPersistent: the server is killed and restarted with its data
// (Redis AOF, ZooKeeper). Quickly: A should keep its lease. After a
// downtime longer than the bound: A must lose its lease at its deadline,
// and B be granted only after.
func restartPersistent(long bool) func(e *env) {
	return func(e *env) {
		a, b := e.inproc("A", e.srv.Addrs), e.inproc("B", e.srv.Addrs)
		e.recoverWith = a
		ga, ok := e.mustLock(a, LockArgs{})
		if !ok {
			return
		}
		e.expectWrites(ga, a, 2)
		waiting := e.lockAsync(b, LockArgs{Timeout: 3*e.bound + 30*time.Second})
		time.Sleep(100 * time.Millisecond)
		end := e.fault("kill-restart-server", "server")
		e.must(e.srv.Kill(), "kill server")
		if long {
			time.Sleep(e.bound + 500*time.Millisecond)
			e.expect(a.WaitDone(0), "A lost its lease while the server was down for longer than %v", e.bound)
		}
		e.must(e.srv.Restart(), "restart server")
		end()
		if !long {
			time.Sleep(e.bound)
			kept := !a.WaitDone(0)
			e.note("A kept its lease through the restart: %v", kept)
			if kept {
				a.Unlock(5 * time.Second)
			}
		}
		select {
		case r := <-waiting:
			if e.expect(r.err == nil, "B granted after the restart: %s", desc(r.err)) {
				e.expectWrites(r.g, b, 1)
				b.Unlock(5 * time.Second)
			}
		case <-time.After(3*e.bound + 35*time.Second):
			e.expect(false, "B's Lock did not return")
		}
	}
}

// unlockInOutage: A unlocks while the server is down; the server restarts
// with its data, A's grant included. The Unlock fails, but ends A's lease
// and is retried in the background, so B is granted within seconds of the
// server's return, not when A's 30 s TTL runs out.
func unlockInOutage(e *env) {
	const ttl = 30 * time.Second
	a, b := e.inproc("A", e.srv.Addrs), e.inproc("B", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{TTL: ttl})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 1)
	end := e.fault("kill-restart-server", "server")
	e.must(e.srv.Kill(), "kill server")
	err := a.Unlock(500 * time.Millisecond)
	e.note("A's Unlock while the server was down: %v", err)
	e.expect(a.WaitDone(time.Second), "A's lease ended by its Unlock, failed or not")
	e.must(e.srv.Restart(), "restart server")
	end()
	back := time.Now()
	r := <-e.lockAsync(b, LockArgs{Timeout: ttl})
	if e.expect(r.err == nil, "B granted after the restart: %s", desc(r.err)) {
		waited := time.Since(back)
		e.expect(waited < e.bound+5*time.Second, "B granted %v after the server was back; A's TTL was %v", waited.Round(time.Millisecond), ttl)
		e.expectWrites(r.g, b, 1)
		b.Unlock(5 * time.Second)
	}
}

// zkSessionExpiry: A is cut off until the server expires its session,
// which deletes A's node; B, queued behind A, is granted. When the
// network heals A's client finds its session expired: it must leave B's
// node alone, and A queues again and is granted after B.
func zkSessionExpiry(e *env) {
	p := e.proxy(0)
	a := e.inproc("A", []string{p.Addr()})
	b, c := e.inproc("B", e.srv.Addrs), e.inproc("C", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	waiting := e.lockAsync(b, LockArgs{Timeout: 3*e.bound + 10*time.Second})
	time.Sleep(200 * time.Millisecond)
	end := e.fault("partition", "A")
	p.Partition()
	e.expect(a.WaitDone(e.bound+time.Second), "A lost its lease within %v of the partition", e.bound+time.Second)
	var r lockResult
	select {
	case r = <-waiting:
	case <-time.After(3*e.bound + 15*time.Second):
		r.err = errors.New("B's Lock did not return")
	}
	p.Heal()
	end()
	if !e.expect(r.err == nil, "B granted once A's session expired: %s", desc(r.err)) {
		return
	}
	e.expectWrites(r.g, b, 1)
	time.Sleep(e.bound / 2) // A reconnects and learns its session expired
	e.cTriesWhileBHolds(c)
	again := e.lockAsync(a, LockArgs{Timeout: 2*e.bound + 10*time.Second})
	time.Sleep(300 * time.Millisecond)
	b.Unlock(5 * time.Second)
	select {
	case r := <-again:
		if e.expect(r.err == nil, "A granted again after B: %s", desc(r.err)) {
			e.expectWrites(r.g, a, 1)
			a.Unlock(5 * time.Second)
		}
	case <-time.After(2*e.bound + 15*time.Second):
		e.expect(false, "A's new Lock did not return")
	}
}

// zkLeaderLoss: the ensemble's leader is killed while A holds and B waits.
// Every client is disconnected during the election; A keeps its lease if
// the ensemble answers again within its session timeout, else loses it at
// its deadline; B is granted only after A's lease ends.
func zkLeaderLoss(e *env) {
	a, b := e.inproc("A", e.srv.Addrs), e.inproc("B", e.srv.Addrs)
	e.recoverWith = b
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	waiting := e.lockAsync(b, LockArgs{Timeout: 60 * time.Second})
	time.Sleep(200 * time.Millisecond)
	end := e.fault("kill-leader", "server")
	start := time.Now()
	idx, err := e.srv.ZK.KillLeader()
	e.must(err, "kill leader")
	_, err = e.srv.ZK.WaitLeader(30 * time.Second)
	e.must(err, "new leader")
	e.note("new leader elected %v after the kill", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(e.bound)
	e.must(e.srv.ZK.Node(idx).Restart(), "restart the old leader")
	end()
	kept := !a.WaitDone(0)
	e.note("A kept its lease through the election: %v", kept)
	if kept {
		a.Unlock(5 * time.Second)
	}
	select {
	case r := <-waiting:
		if e.expect(r.err == nil, "B granted after the election: %s", desc(r.err)) {
			e.expectWrites(r.g, b, 1)
			b.Unlock(5 * time.Second)
		}
	case <-time.After(65 * time.Second):
		e.expect(false, "B's Lock did not return")
	}
}

// pgLostWakeup: B waits for the key A holds with a 30 s TTL, and every
// notification to B's LISTEN connection is lost (the connection stays
// up). A unlocks: B's own steps, a heartbeat apart, must find the key free
// within seconds, not when A's TTL would have run out; the notification
// only ever wakes.
func pgLostWakeup(e *env) {
	const ttl = 30 * time.Second
	p := e.proxy(0)
	a, b := e.inproc("A", e.srv.Addrs), e.inproc("B", []string{p.Addr()})
	e.recoverWith = b
	ga, ok := e.mustLock(a, LockArgs{TTL: ttl})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 1)
	lost := p.DropPushes(-1)
	end := e.fault("lost-notifications", "B")
	defer func() { lost.Stop(); end() }()
	waiting := e.lockAsync(b, LockArgs{Timeout: ttl})
	time.Sleep(1500 * time.Millisecond) // B queued, its LISTEN in force
	e.must(a.Unlock(5*time.Second), "A's Unlock")
	released := time.Now()
	select {
	case r := <-waiting:
		waited := time.Since(released)
		if e.expect(r.err == nil, "B granted after A's Unlock: %s", desc(r.err)) {
			e.note("B granted %v after A's Unlock, its wake-up lost", waited.Round(10*time.Millisecond))
			e.expect(waited < 2*driver.Heartbeat+time.Second, "B granted %v after A's Unlock, want within %v (its heartbeat steps)", waited.Round(time.Millisecond), 2*driver.Heartbeat+time.Second)
			e.expectWrites(r.g, b, 1)
			b.Unlock(5 * time.Second)
		}
	case <-time.After(ttl + 5*time.Second):
		e.expect(false, "B's Lock did not return")
	}
	e.expect(len(lost.Dropped()) > 0, "a notification to B was lost")
}
