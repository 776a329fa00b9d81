package zookeeper

import (
	"context"
	"fmt"
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
//   - keeps proof that the session is alive: every write or sync that
//     succeeds proves it was alive when sent, so the server cannot expire it
//     before that moment plus the session timeout; when no proof came for
//     a third of the timeout it sends a sync (the heartbeat);
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

	mu        sync.Mutex
	leases    map[*driver.Lease]*grant
	waiters   int
	orphans   []*orphan
	proofSid  int64     // session of proofAt
	proofAt   time.Time // when the last request proving proofSid alive was sent
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
	m.wg.Add(1)
	go m.loop()
	return m
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
	var lost []loss

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0
	}
	reconnected := connected && !m.connected
	m.connected = connected

	// Leases of a session that is over: go-zookeeper learned it expired.
	for l, g := range m.leases {
		if g.session != sid || st == zk.StateExpired {
			lost = append(lost, loss{l, fmt.Errorf("zookeeper: session %#x ended: %w", g.session, zk.ErrSessionExpired)})
			delete(m.leases, l)
		}
	}
	// Leases whose session may expire any moment now.
	var deadline time.Time
	if len(m.leases) > 0 {
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
	}
	// Orphans of a session that is over (go-zookeeper learned it expired,
	// or replaced it): the server deleted their nodes. A connection down
	// for longer than the timeout does not make it so: a server restarted
	// from its data restores its sessions with a fresh timeout, and the
	// client may reconnect to the session, whose nodes then stay until the
	// janitor deletes them.
	kept := m.orphans[:0]
	for _, o := range m.orphans {
		if o.session == 0 || o.session == sid {
			kept = append(kept, o)
		}
	}
	clear(m.orphans[len(kept):])
	m.orphans = kept

	active := len(m.leases) > 0 || m.waiters > 0
	if active {
		m.busyAt = now
	}
	beatAt := m.proofAt.Add(timeout / 3)
	if m.proofSid != sid {
		beatAt = now
	}
	if beatAt.Before(m.beatAfter) {
		beatAt = m.beatAfter
	}
	if active && !m.beating && !now.Before(beatAt) {
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

	var next time.Duration
	if active || len(m.orphans) > 0 || now.Sub(m.busyAt) < linger {
		next = pollEvery(timeout)
		if len(m.leases) > 0 {
			next = min(next, deadline.Sub(now))
		}
		if active && !m.beating {
			next = min(next, beatAt.Sub(now))
		}
		next = max(next, time.Millisecond)
	}
	m.sleeping = next == 0
	m.mu.Unlock()

	for _, x := range lost {
		if x.l.Lost != nil {
			x.l.Lost(x.err)
		}
	}
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

// clean runs the janitor once over the orphans.
func (m *monitor) clean(timeout time.Duration) {
	defer m.wg.Done()
	m.mu.Lock()
	todo := m.orphans
	m.orphans = nil
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	var left []*orphan
	for _, o := range todo {
		if !m.d.clean(ctx, o) {
			left = append(left, o)
		}
	}
	m.mu.Lock()
	m.orphans = append(m.orphans, left...)
	m.cleaning = false
	m.mu.Unlock()
}

// proved records that session sid was alive when a request was sent at at.
func (m *monitor) proved(sid int64, at time.Time) {
	if sid == 0 {
		return
	}
	m.mu.Lock()
	if sid != m.proofSid || at.After(m.proofAt) {
		m.proofSid, m.proofAt = sid, at
	}
	m.mu.Unlock()
}

// provenSince reports whether session sid was proven alive at or after t.
func (m *monitor) provenSince(sid int64, t time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proofSid == sid && !m.proofAt.Before(t)
}

// validitySince is how long after begin session sid is sure to live: its
// timeout, counted from the last proof that it was alive when that proof
// is older than begin.
func (m *monitor) validitySince(begin time.Time, sid int64, timeout time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proofSid != sid {
		return 0 // no proof of this session: lock refreshes the grant first
	}
	if m.proofAt.Before(begin) {
		return timeout - begin.Sub(m.proofAt)
	}
	return timeout
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
