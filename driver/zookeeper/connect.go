package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
)

// starter brings the connection of a Locker from Dial or lock.Open to its
// first session. go-zookeeper connects in the background (zk.Connect
// returns at once, and tries the servers in turn until Close), so the
// driver exists before the session does: a goroutine (run) waits for the
// session, authenticates it with the digest identity if there is one, and
// then opens the gate (ready). Until then, every call that would send a
// request waits at the gate (await), so that no request goes out without
// the session's negotiated timeout known and the identity set; after it,
// go-zookeeper sends the identity again on each reconnection, and the
// gate costs an atomic load.
type starter struct {
	conn       *zk.Conn
	list       string        // the servers, for messages
	hosts      int           // addresses go-zookeeper tries in turn (zk.HostProvider.Len)
	distinct   int           // distinct servers, for tlsFailed
	tls        bool          // Options.TLS is set
	asked      time.Duration // the session timeout asked for
	auth       []byte        // digest user:password; nil without an identity
	connecting time.Time     // zk.Connect was called then: every session is younger
	errs       *connErrors
	wake       chan struct{} // a session event came

	mon atomic.Pointer[monitor] // the driver's, once it exists: session events poke it
	up  atomic.Bool             // the gate is open

	ready chan struct{} // closed when run is done: err says how
	err   error         // why the gate will never open; nil once up

	mu    sync.Mutex
	bound context.Context // Dial's context, which bounds each attempt until Dial returns; nil after

	sock  socket          // the connection go-zookeeper reads
	ended <-chan zk.Event // zk.Connect's event channel: closed when its goroutines are gone
}

func newStarter(servers []string, asked time.Duration, o *Options, bound context.Context) *starter {
	s := &starter{
		list:       strings.Join(servers, ","),
		distinct:   len(distinct(servers)),
		tls:        o.TLS != nil,
		asked:      asked,
		errs:       newConnErrors(),
		wake:       make(chan struct{}, 1),
		ready:      make(chan struct{}),
		bound:      bound,
		connecting: time.Now(),
	}
	if o.Username != "" {
		s.auth = []byte(o.Username + ":" + o.Password)
	}
	return s
}

func distinct(ss []string) map[string]bool {
	m := make(map[string]bool, len(ss))
	for _, s := range ss {
		m[s] = true
	}
	return m
}

// event is go-zookeeper's event callback: session events wake run and the
// monitor (watch events go to their waiters). It must not block.
func (s *starter) event(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	if m := s.mon.Load(); m != nil {
		m.poke()
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// boundDialer gives each connection attempt no more time than Dial's
// context has left, while Dial waits (go-zookeeper gives 1s).
func (s *starter) boundDialer(dial zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		s.mu.Lock()
		ctx := s.bound
		s.mu.Unlock()
		if ctx != nil {
			if dl, ok := ctx.Deadline(); ok {
				timeout = min(timeout, max(time.Until(dl), time.Millisecond))
			}
		}
		return dial(network, address, timeout)
	}
}

// unbind ends Dial's bound on the connection attempts.
func (s *starter) unbind() {
	s.mu.Lock()
	s.bound = nil
	s.mu.Unlock()
}

// run is the starter's goroutine (counted in d.calls): it waits for a
// session, authenticates it, records that the leader heard from it after
// zk.Connect was called (the proof a first grant needs: see
// monitor.connectedSince), and opens the gate. It stops when the driver
// closes, or when the session's timeout is unknown or the authentication
// fails for a reason a reconnection will not mend.
func (s *starter) run(d *zkDriver) {
	defer d.calls.Done()
	for {
		if !s.waitSession(d.mon.stop) || closed(d.mon.stop) {
			s.finish(fmt.Errorf("zookeeper: closed before a session with %s: %w", s.list, zk.ErrClosing))
			return
		}
		if d.timeout.get() <= 0 {
			s.finish(errors.New("zookeeper: the server's connect response carried no session timeout"))
			return
		}
		if s.auth != nil {
			if err := s.conn.AddAuth("digest", s.auth); err != nil {
				if transient(err) || errors.Is(err, zk.ErrClosing) {
					// The connection broke: authenticate the next session.
					select {
					case <-d.mon.stop: // the loop's next check stops it
					case <-time.After(pollEvery(s.asked)):
					}
					continue
				}
				s.finish(fmt.Errorf("zookeeper: digest authentication: %w", err))
				return
			}
		}
		d.mon.connectedSince(s.conn.SessionID(), s.connecting)
		s.up.Store(true)
		s.finish(nil)
		return
	}
}

// waitSession waits until the connection has a session, and reports
// false if stop is closed first.
func (s *starter) waitSession(stop <-chan struct{}) bool {
	t := time.NewTicker(100 * time.Millisecond) // a safety net: events wake it
	defer t.Stop()
	for s.conn.State() != zk.StateHasSession {
		select {
		case <-stop:
			return false
		case <-s.wake:
		case <-t.C:
		}
	}
	return true
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (s *starter) finish(err error) {
	s.err = err
	close(s.ready)
}

// errNoSession is the cause of a wait for the first session that outlasted
// the session timeout asked for.
var errNoSession = errors.New("no session")

// await waits at the gate: it returns nil once the first session is up
// and authenticated (at once after that, and on a Locker from New, whose
// connection is the caller's). Otherwise it returns an error once one of
// these comes first:
//
//   - each of the addresses go-zookeeper tries in turn has failed a
//     connection attempt since the wait began (refused, unreachable, timed
//     out after go-zookeeper's 1s connect timeout, or closed by a server
//     that is not serving): the error wraps the last attempt's;
//   - every server's last attempt failed TLS in a way that trying again
//     will not mend: the error wraps crypto/tls's;
//   - the session timeout asked for has passed (servers that accept
//     connections but give no session);
//   - ctx ends;
//   - the session cannot be used (see run), or the driver is closed.
func (s *starter) await(ctx context.Context) error {
	if s == nil || s.up.Load() {
		return nil
	}
	began, _ := s.errs.watch()
	limit := time.NewTimer(s.asked)
	defer limit.Stop()
	for {
		failed, changed := s.errs.watch()
		select {
		case <-s.ready:
			return s.err
		default:
		}
		if s.tls {
			if err := s.errs.tlsFailed(s.distinct); err != nil {
				return fmt.Errorf("zookeeper: connecting to %s over TLS: %w", s.list, err)
			}
		}
		if failed-began >= s.hosts {
			return driver.Unavailable(fmt.Errorf("zookeeper: %s unreachable: every server failed a connection attempt, the last with: %w", s.list, s.errs.lastErr()))
		}
		select {
		case <-s.ready:
		case <-changed:
		case <-limit.C:
			return driver.Unavailable(s.noSession(fmt.Errorf("%w within %v, the session timeout asked for", errNoSession, s.asked)))
		case <-ctx.Done():
			return s.noSession(ctx.Err())
		}
	}
}

// noSession is the error of a wait for the first session that cause ended.
func (s *starter) noSession(cause error) error {
	if last := s.errs.lastErr(); last != nil {
		return fmt.Errorf("zookeeper: connecting to %s: %w (last connection error: %w)", s.list, cause, last)
	}
	return fmt.Errorf("zookeeper: connecting to %s: %w", s.list, cause)
}

// neverUp reports whether the gate has never opened: no request was sent
// on the connection yet.
func (s *starter) neverUp() bool { return s != nil && !s.up.Load() }

// socket is the connection go-zookeeper dialed last (it keeps one at a
// time), so that Close can end it; see shutdown.
type socket struct {
	mu sync.Mutex
	c  net.Conn
}

func (s *socket) wrap(dial zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err == nil {
			s.mu.Lock()
			s.c = c
			s.mu.Unlock()
		}
		return c, err
	}
}

// shutdown ends a connection Dial made once conn.Close has returned, and
// waits (for 2s at most) until go-zookeeper's goroutines are gone, which
// it shows by closing ended, the event channel zk.Connect returned.
// conn.Close sends the closeSession request and waits a second at most
// for its reply; go-zookeeper's reader stays blocked on the socket until
// the reply comes, which on a busy ensemble (closeSession is a quorum
// write) can be seconds later, and a Locker's Close promises that none of
// its goroutines outlives it. Closing the socket ends the reader; the
// server closes the session all the same (the request was sent), or
// expires it.
func (s *starter) shutdown() {
	s.sock.mu.Lock()
	if s.sock.c != nil {
		s.sock.c.Close()
	}
	s.sock.mu.Unlock()
	limit := time.NewTimer(2 * time.Second)
	defer limit.Stop()
	for {
		select {
		case _, ok := <-s.ended:
			if !ok {
				return
			}
		case <-limit.C:
			return
		}
	}
}
