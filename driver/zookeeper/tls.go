package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/tlsconf"
	"github.com/go-zookeeper/zk"
)

// tlsDialer runs a TLS handshake with c over the connections dial makes,
// within the timeout go-zookeeper gives for the whole connection. The
// name verified (and sent as SNI) is c.ServerName, else the host of the
// address dialled, which is the server as it was given (see namedHosts).
func tlsDialer(dial zk.Dialer, c *tls.Config) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		start := time.Now()
		raw, err := dial(network, address, timeout)
		if err != nil {
			return nil, err
		}
		cfg := c
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(address); err == nil {
				cfg = c.Clone()
				cfg.ServerName = host
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout-time.Since(start))
		defer cancel()
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
}

// namedHosts is a zk.HostProvider that hands the dialer the servers as
// they were given (host:port), shuffled and tried in turn as
// go-zookeeper's DNSHostProvider tries them, but not resolved: that one
// gives the dialer IP addresses, which a certificate naming the host
// would not match. The dial resolves the name.
type namedHosts struct {
	mu         sync.Mutex
	servers    []string
	curr, last int
}

func (h *namedHosts) Init(servers []string) error {
	if len(servers) == 0 {
		return errors.New("no servers")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	rand.Shuffle(len(h.servers), func(i, j int) { h.servers[i], h.servers[j] = h.servers[j], h.servers[i] })
	h.curr, h.last = -1, -1
	return nil
}

func (h *namedHosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

func (h *namedHosts) Next() (server string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart = h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

func (h *namedHosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}

// connErrors keeps the last error of each server's connection attempts:
// of the dial (with TLS, the handshake) or of the first read, where a
// server that refuses the client's certificate says so in TLS 1.3 (and a
// server that is not serving yet closes the connection). Calls waiting for
// the first session use them to say why there is none, to give up once
// every server failed (see starter.await), and to give up at once when
// every server failed TLS in a way that trying again will not mend.
type connErrors struct {
	mu       sync.Mutex
	last     error
	byAddr   map[string]error
	failures int           // attempts failed so far
	changed  chan struct{} // closed at the next failure
}

func newConnErrors() *connErrors {
	return &connErrors{byAddr: map[string]error{}, changed: make(chan struct{})}
}

func (e *connErrors) record(addr string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last = err
	e.byAddr[addr] = err
	e.failures++
	close(e.changed)
	e.changed = make(chan struct{})
}

// watch returns the number of failed attempts so far, and a channel
// closed at the next failure.
func (e *connErrors) watch() (int, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failures, e.changed
}

func (e *connErrors) ok(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byAddr, addr)
}

// lastErr is the latest error of any attempt, nil if none failed.
func (e *connErrors) lastErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// tlsFailed returns a TLS failure (tlsconf.Failed) when each of n
// servers' last attempt ended with one, else nil.
func (e *connErrors) tlsFailed(n int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	failed := 0
	for _, err := range e.byAddr {
		if tlsconf.Failed(err) {
			failed++
		}
	}
	if failed < n || !tlsconf.Failed(e.last) {
		return nil
	}
	return e.last
}

// wrap makes dial's failures, and its connections' failed first reads,
// recorded in e.
func (e *connErrors) wrap(dial zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err != nil {
			e.record(address, err)
			return nil, err
		}
		return &watchedConn{Conn: c, addr: address, e: e}, nil
	}
}

// watchedConn records the outcome of its first read in e.
type watchedConn struct {
	net.Conn
	addr string
	e    *connErrors
	read atomic.Bool // a read returned data
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.read.Load() {
		switch {
		case n > 0:
			c.read.Store(true)
			c.e.ok(c.addr)
		case err != nil:
			c.e.record(c.addr, err)
		}
	}
	return n, err
}
