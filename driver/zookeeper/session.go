package zookeeper

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// grant is the driver's state of a granted lease (driver.Lease.Data).
type grant struct {
	path    string
	session int64 // the session owning the node
}

// monitor is the one background goroutine of a driver. While the driver
// holds or waits for leases it
//
//   - keeps proof that the session is alive in the leader's eyes (see
//     answered): when the proof is older than half the timeout it sends a
//     sync (the heartbeat);
//   - ends every lease of the session (Lease.Lost) when the last proof is
//     older than the session timeout minus a drift margin, which happens
//     while disconnected: the server may be about to expire the session,
//     and another client could then be granted the keys;
//   - ends every lease at once when go-zookeeper reports the session
//     expired or has replaced it;
//   - after a reconnection within the timeout, checks that each lease's
//     node still exists;
//   - deletes orphans: nodes whose owner gave up on them (cancelled waits,
//     lost replies, failed releases), for as long as their session may
//     live.
//
// It learns of connection changes by polling conn.State and
// conn.SessionID while it has work, and at once when a Locker from Dial
// gets a go-zookeeper event.
type monitor struct {
	d      *zkDriver
	wake   chan struct{}
	stop   chan struct{}
	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	leases   map[*driver.Lease]*grant
	waiters  int
	orphans  []*orphan
	proofSid int64     // session of proofAt
	proofAt  time.Time // the leader heard from proofSid at or after this moment
	// touches are requests of session touchSid answered after proofAt
	// was set, which a later write or sync may prove the leader heard of
	// (see answered), in the order they were answered.
	touches   []touch
	touchSid  int64
	downAt    time.Time // when the connection was last seen down (0: not since the last look)
	beatAfter time.Time // no heartbeat before (after a failed one)
	connected bool      // state at the last look
	beating   bool      // a heartbeat is under way
	checking  bool      // a post-reconnection check is under way
	cleaning  bool      // the janitor is running
	busyAt    time.Time // when the monitor last had leases or waiters
	sleeping  bool      // the loop waits for a poke only
	closed    bool      // the loop and its helpers are stopped
	done      bool      // orphans are no longer taken
}

// linger is how long the monitor keeps polling after its last lease or
// waiter left, so that a Locker that takes and releases leases in a row
// does not wake it for each one.
const linger = time.Second

func newMonitor(d *zkDriver) *monitor {
	m := &monitor{d: d, wake: make(chan struct{}, 1), stop: make(chan struct{}), leases: map[*driver.Lease]*grant{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m
}

// start runs the monitor's loop; it is called once d.mon is set, which
// the loop's calls read.
func (m *monitor) start() {
	m.wg.Add(1)
	go m.loop()
}

// pollEvery is how often the monitor looks at the connection while it has
// work.
func pollEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/20, 5*time.Millisecond), 100*time.Millisecond)
}

func (m *monitor) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *monitor) loop() {
	defer m.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := m.tick(time.Now())
		if next <= 0 {
			next = time.Hour // idle: only a poke wakes the loop (see sleeping)
		}
		t.Reset(next)
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-t.C:
		}
	}
}

type loss struct {
	l   *driver.Lease
	err error
}

// tick looks at the connection and the leases, starts what is due, and
// returns when to look again (0: only when poked).
func (m *monitor) tick(now time.Time) time.Duration {
	if m.d.conn == nil {
		return 0 // New(nil, ...): every call fails validation
	}
	timeout := m.d.sessionTimeout()
	st, sid := m.d.conn.State(), m.d.conn.SessionID()
	connected := st == zk.StateHasSession

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0
	}
	reconnected := m.noteStateLocked(now, st, sid)
	lost, deadline := m.dropLostLocked(now, st, sid, timeout)
	m.pruneOrphansLocked(sid)
	active := len(m.leases) > 0 || m.waiters > 0
	if active {
		m.busyAt = now
	}
	beatAt := m.beatAtLocked(now, sid, timeout)
	if beatAt.Before(m.beatAfter) {
		beatAt = m.beatAfter
	}
	m.startDueLocked(now, beatAt, timeout, active, connected, reconnected)
	next := m.nextLocked(now, beatAt, deadline, timeout, active, connected)
	m.mu.Unlock()

	for _, x := range lost {
		if x.l.Lost != nil {
			x.l.Lost(x.err)
		}
	}
	return next
}

// noteStateLocked records the connection's state, and reports whether it
// has just got its session back.
func (m *monitor) noteStateLocked(now time.Time, st zk.State, sid int64) (reconnected bool) {
	connected := st == zk.StateHasSession
	reconnected = connected && !m.connected
	m.connected = connected
	switch {
	case st == zk.StateDisconnected || st == zk.StateConnecting:
		m.downAt = now
	case reconnected && !m.downAt.IsZero():
		// The connect request went out after downAt, and the leader
		// touched the session when the server took it: it creates a new
		// session (PrepRequestProcessor, createSession) and revalidates a
		// resumed one (LearnerZooKeeperServer.revalidateSession sends
		// REVALIDATE; Leader.revalidateSession touches it).
		m.provedLocked(sid, m.downAt)
		m.downAt = time.Time{}
	}
	return reconnected
}

// dropLostLocked takes out the leases that are lost: those of a session
// that is over, and all of them once the session may expire any moment.
// It returns them, and the moment the rest are lost without new proof.
func (m *monitor) dropLostLocked(now time.Time, st zk.State, sid int64, timeout time.Duration) (lost []loss, deadline time.Time) {
	// Leases of a session that is over: go-zookeeper learned it expired.
	for l, g := range m.leases {
		if g.session != sid || st == zk.StateExpired {
			lost = append(lost, loss{l, fmt.Errorf("zookeeper: session %#x ended: %w", g.session, zk.ErrSessionExpired)})
			delete(m.leases, l)
		}
	}
	if len(m.leases) == 0 {
		return lost, deadline
	}
	// Leases whose session may expire any moment now.
	if m.proofSid == sid {
		deadline = m.proofAt.Add(timeout - driver.DriftMargin(timeout))
	}
	if !now.Before(deadline) {
		for l, g := range m.leases {
			lost = append(lost, loss{l, fmt.Errorf("zookeeper: no proof that session %#x is alive for its timeout %v (connection lost?): the server may expire it and grant the key to another client", g.session, timeout)})
			delete(m.leases, l)
			m.orphans = append(m.orphans, &orphan{path: g.path, session: g.session})
		}
	}
	return lost, deadline
}

// pruneOrphansLocked forgets the orphans of a session that is over
// (go-zookeeper learned it expired, or replaced it): the server deleted
// their nodes. A connection down for longer than the timeout does not
// make it so: a server restarted from its data restores its sessions with
// a fresh timeout, and the client may reconnect to the session, whose
// nodes then stay until the janitor deletes them.
func (m *monitor) pruneOrphansLocked(sid int64) {
	kept := m.orphans[:0]
	for _, o := range m.orphans {
		if o.session == 0 || o.session == sid {
			kept = append(kept, o)
		}
	}
	clear(m.orphans[len(kept):])
	m.orphans = kept
}

// startDueLocked starts the heartbeat, the check after a reconnection and
// the janitor, when due and not running.
func (m *monitor) startDueLocked(now, beatAt time.Time, timeout time.Duration, active, connected, reconnected bool) {
	// The proof is kept fresh while the session lasts, idle or not: a
	// grant after an idle spell would otherwise wait reportLag (3 s of a
	// 10 s session) for a request old enough to be proven. It costs a
	// sync per fifth of the timeout or so, beside go-zookeeper's own pings.
	if (active || connected) && !m.beating && !now.Before(beatAt) {
		m.beating = true
		m.wg.Add(1)
		go m.heartbeat(timeout)
	}
	if reconnected && len(m.leases) > 0 && !m.checking {
		m.checking = true
		held := make(map[*driver.Lease]*grant, len(m.leases))
		for l, g := range m.leases {
			held[l] = g
		}
		m.wg.Add(1)
		go m.check(held, timeout)
	}
	if len(m.orphans) > 0 && !m.cleaning {
		m.cleaning = true
		m.wg.Add(1)
		go m.clean(timeout)
	}
}

// nextLocked is when tick looks again: 0 only when poked.
func (m *monitor) nextLocked(now, beatAt, deadline time.Time, timeout time.Duration, active, connected bool) time.Duration {
	var next time.Duration
	polling := active || len(m.orphans) > 0 || now.Sub(m.busyAt) < linger
	switch {
	case polling:
		next = pollEvery(timeout)
		if len(m.leases) > 0 {
			next = min(next, deadline.Sub(now))
		}
		if active && !m.beating {
			next = min(next, beatAt.Sub(now))
		}
		next = max(next, time.Millisecond)
	case connected && !m.beating:
		// Idle: the loop wakes for the next heartbeat, or a poke.
		next = max(beatAt.Sub(now), time.Millisecond)
	}
	m.sleeping = !polling
	return next
}

// heartbeat proves the session alive with a sync, which the leader checks
// the session for (a read could be answered by a follower cut off from
// the leader, which may have expired the session meanwhile).
func (m *monitor) heartbeat(timeout time.Duration) {
	defer m.wg.Done()
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	_, err := write(ctx, m.d, func() (string, error) { return m.d.conn.Sync("/") })
	m.mu.Lock()
	m.beating = false
	if err != nil {
		m.beatAfter = time.Now().Add(pollEvery(timeout))
	}
	m.mu.Unlock()
	m.poke()
}

// check runs after a reconnection: a lease whose node is gone is lost.
func (m *monitor) check(held map[*driver.Lease]*grant, timeout time.Duration) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		m.checking = false
		m.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	for l, g := range held {
		ok, st, err := exists(ctx, m.d, g.path)
		if err != nil {
			return // refreshes will tell
		}
		if (!ok || st.EphemeralOwner != g.session) && m.remove(l) && l.Lost != nil {
			l.Lost(fmt.Errorf("zookeeper: lock node %s is gone after a reconnection: %w", g.path, driver.ErrNotHeld))
		}
	}
}

// clean runs the janitor once over the orphans (see cleanAll); those
// left over come first in the next round, ahead of those adopted since.
func (m *monitor) clean(timeout time.Duration) {
	defer m.wg.Done()
	m.mu.Lock()
	todo := m.orphans
	m.orphans = nil
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	left := m.d.cleanAll(ctx, todo)
	m.mu.Lock()
	m.orphans = append(left, m.orphans...)
	m.cleaning = false
	m.mu.Unlock()
}

// reportLag is how long after a request was answered a later write or
// sync may count it as heard of by the leader. A follower does not pass
// its clients' requests on as proof of their sessions: it touches the
// session in its own table (LearnerSessionTracker.touchSession), and the
// leader hears of the touches only in the follower's reply to its next
// ping (Learner.ping, LearnerHandler's PING case), sent every half tick
// (Leader.lead); a request it forwards is only checked there
// (Leader.submitLearnerRequest, PrepRequestProcessor). So a write or sync
// answered through a follower, which shows the follower's link to the
// leader working when it was forwarded, proves the touches of the requests
// answered a ping interval before it was sent, not its own. The ping
// interval is a quarter of the session timeout at most, as the server
// grants sessions of 2 ticks at least (minSessionTimeout's default); the
// rest is room for the ping's delivery.
func reportLag(timeout time.Duration) time.Duration { return timeout * 3 / 10 }

// touch is a request answered: sent at sent, answered at answered.
type touch struct{ sent, answered time.Time }

// maxTouches bounds the touches kept; the oldest are dropped, which only
// makes the proof older.
const maxTouches = 64

// answered records that a request of session sid sent at sent was just
// answered. Any request answered touches the session on the server that
// answered it. With confirms set (a write or sync, which the leader
// handles), the leader was reachable when it was forwarded, after sent:
// every touch answered reportLag before sent was reported to the leader
// by then, so the leader heard from the session at or after the latest
// such touch's send time, and cannot expire it before that moment plus
// the timeout. The request itself may be the last touch the leader never
// hears of (its follower cut off right after it answered): it is proof
// only for a later one.
func (m *monitor) answered(sid int64, sent time.Time, confirms bool) {
	if sid == 0 {
		return
	}
	now := time.Now()
	lag := reportLag(m.d.sessionTimeout())
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.touchSid != sid {
		m.touchSid, m.touches = sid, m.touches[:0]
	}
	if confirms {
		best := time.Time{}
		for _, t := range m.touches {
			if !t.answered.After(sent.Add(-lag)) && t.sent.After(best) {
				best = t.sent
			}
		}
		if !best.IsZero() {
			m.provedLocked(sid, best)
		}
	}
	// Two touches answered close together count as one, sent at the
	// later time and answered at the later time: a claim that still holds.
	if n := len(m.touches); n > 0 && now.Sub(m.touches[n-1].answered) < lag/16 {
		last := &m.touches[n-1]
		last.sent, last.answered = later(last.sent, sent), later(last.answered, now)
		return
	}
	if len(m.touches) == maxTouches {
		m.touches = append(m.touches[:0], m.touches[1:]...)
	}
	m.touches = append(m.touches, touch{sent, now})
}

// provedLocked records that the leader heard from session sid at or after
// at, and drops the touches that cannot prove more.
func (m *monitor) provedLocked(sid int64, at time.Time) {
	if sid != m.proofSid || at.After(m.proofAt) {
		m.proofSid, m.proofAt = sid, at
	}
	if m.touchSid == sid {
		m.touches = slices.DeleteFunc(m.touches, func(t touch) bool { return !t.sent.After(m.proofAt) })
	}
}

// connectedSince records that session sid was established by a connect
// request sent after at: the leader created it then.
func (m *monitor) connectedSince(sid int64, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.provedLocked(sid, at)
}

// beatAtLocked is when the heartbeat is due: once the proof of session sid
// is a fifth of the timeout old, as soon as a sync can prove a touch newer
// than it (one answered reportLag before), or, when there is none, early
// enough to make one that a sync can prove by then. A fifth plus
// reportLag (0.3) keeps the proof under half the timeout old, which a
// grant needs (ensureProof).
func (m *monitor) beatAtLocked(now time.Time, sid int64, timeout time.Duration) time.Time {
	due, since, lag := now, time.Time{}, reportLag(timeout)
	if m.proofSid == sid {
		due, since = m.proofAt.Add(timeout/5), m.proofAt
	}
	if t, ok := m.oldestTouchLocked(sid, since); ok {
		return later(due, t.answered.Add(lag))
	}
	return due.Add(-lag)
}

// oldestTouchLocked is the first touch of session sid sent after since.
func (m *monitor) oldestTouchLocked(sid int64, since time.Time) (touch, bool) {
	if m.touchSid != sid {
		return touch{}, false
	}
	for _, t := range m.touches {
		if t.sent.After(since) {
			return t, true
		}
	}
	return touch{}, false
}

// provableAt is the earliest moment a sync can prove that the leader
// heard from session sid after since, if a touch can show it.
func (m *monitor) provableAt(sid int64, since time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.oldestTouchLocked(sid, since)
	return t.answered.Add(reportLag(m.d.sessionTimeout())), ok
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// provenSince reports whether session sid was proven alive at or after t.
func (m *monitor) provenSince(sid int64, t time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proofSid == sid && !m.proofAt.Before(t)
}

// validitySince is how long after begin session sid is sure to live, as
// a grant's or refresh's validity (driver.Lease.Validity): its timeout,
// counted from the last proof that it was alive when that proof is older
// than begin; zero when there is no proof of sid.
func (m *monitor) validitySince(begin time.Time, sid int64, timeout time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proofSid != sid {
		return 0
	}
	return validityAfterProof(timeout, begin.Sub(m.proofAt))
}

// validityAfterProof is the validity of a call that began age after the
// last proof of a session of the given timeout: what is left of the
// timeout, less the difference between the drift margins that lock and
// the monitor subtract (lock: DriftMargin of the validity, from the call;
// the monitor: DriftMargin of the timeout, from the proof), so that
// lock's deadline is never later than the one at which the monitor ends
// the session's leases. It is zero or less when the proof is older than
// the timeout.
func validityAfterProof(timeout, age time.Duration) time.Duration {
	if age <= 0 {
		return timeout
	}
	// v - v/100 <= timeout - timeout/100 - age holds for
	// v = timeout - age - age/99, give or take the truncations of /100,
	// which the microsecond covers.
	return timeout - age - age/99 - time.Microsecond
}

// add registers a granted lease.
func (m *monitor) add(l *driver.Lease, g *grant) {
	m.mu.Lock()
	m.leases[l] = g
	sleeping := m.sleeping
	m.sleeping = false
	m.mu.Unlock()
	if sleeping { // else the loop polls already
		m.poke()
	}
}

// remove forgets a lease and reports whether it was registered.
func (m *monitor) remove(l *driver.Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.leases[l]
	delete(m.leases, l)
	return ok
}

// waiting counts the waits under way (from Join to the grant or Leave),
// which need heartbeats too.
func (m *monitor) waiting(delta int) {
	m.mu.Lock()
	m.waiters += delta
	sleeping := m.sleeping
	m.sleeping = false
	m.mu.Unlock()
	if sleeping {
		m.poke()
	}
}

// adopt hands an orphan to the janitor.
func (m *monitor) adopt(o *orphan) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return
	}
	if o.session == 0 {
		o.session = m.d.conn.SessionID() // 0 too while there is none
	}
	m.orphans = append(m.orphans, o)
	m.sleeping = false
	m.poke()
}

// close stops the monitor: the loop and its helpers first, then, after
// settle (if any), with finalPass, it tries once more, for at most a
// second, to delete the orphans (for a connection that stays open after
// Close, whose session keeps them otherwise). Orphans adopted during
// settle are included.
func (m *monitor) close(finalPass bool, settle func()) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true // tick starts nothing any more
	m.mu.Unlock()
	close(m.stop)
	m.cancel()
	m.wg.Wait()
	if settle != nil {
		settle()
	}
	m.mu.Lock()
	todo := m.orphans
	m.orphans = nil
	m.done = true
	m.mu.Unlock()
	if !finalPass {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, o := range todo {
		m.d.clean(ctx, o)
	}
}
