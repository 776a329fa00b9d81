package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// Proxy is a fault-injecting TCP proxy between clients and one server. It
// understands just enough of the wire protocol (Protocol: RESP, memcached
// text, ZooKeeper, PostgreSQL) to pair each reply with its request, so that it can lose
// the reply of one chosen request after the server applied it, which a
// byte-level proxy cannot do. It can also cut clients off (Partition) and
// let them back (Heal).
//
// A connection whose bytes the proxy could not parse is passed through
// unparsed (see ParseErrors); drop rules do not apply to it.
//
// A connection is a command connection until a request subscribes it
// (Request.Subscribes: Redis's SUBSCRIBE and its kin, PostgreSQL's
// LISTEN), then a pub/sub connection: the two kinds are delayed
// separately (Delay, DelayCommands, DelayPubSub), and the messages a
// pub/sub connection carries can be lost (DropPushes).
type Proxy struct {
	target string
	proto  Protocol
	ln     net.Listener
	wg     sync.WaitGroup

	mu          sync.Mutex
	conns       map[*pconn]struct{}
	partitioned bool
	delays      [2]delays // by connection kind: command, pub/sub
	rules       []*DropRule
	pushRules   []*DropRule // DropPushes
	parseErrs   []error
	closed      bool
}

// NewProxy listens on a free loopback port and forwards every connection
// to target, speaking proto.
func NewProxy(target string, proto Protocol) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, proto: proto, ln: ln, conns: map[*pconn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition cuts every client off from the server, as a network partition
// does: bytes in either direction are dropped, on open connections and on
// new ones, which see a connection that never answers.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.partitioned = true
	p.mu.Unlock()
}

// Heal ends a partition. A connection that lost bytes cannot carry on (a
// TCP stream has no holes), so each is closed; clients reconnect.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.partitioned = false
	var damaged []*pconn
	for c := range p.conns {
		if c.damaged {
			damaged = append(damaged, c)
		}
	}
	p.mu.Unlock()
	for _, c := range damaged {
		c.close()
	}
}

// Delay holds every request for req and every reply for rep before
// passing it on, as a slow network does, in order (a frame waits for the
// ones before it), on every connection; zero ends the delay. Connections
// passed through unparsed are not delayed.
func (p *Proxy) Delay(req, rep time.Duration) {
	p.mu.Lock()
	p.delays[cmdConn] = delays{req, rep}
	p.delays[pubsubConn] = delays{req, rep}
	p.mu.Unlock()
}

// hold sleeps until d after t, for a frame read at t.
func hold(t time.Time, d time.Duration) {
	if d > 0 {
		time.Sleep(time.Until(t.Add(d)))
	}
}

// DropRule loses (or holds) the replies of matching requests. See
// Proxy.DropReplies and Proxy.HoldReplies.
type DropRule struct {
	p       *Proxy
	match   func(Request) bool
	left    int           // < 0: unlimited
	hold    time.Duration // 0: lose the reply; else deliver it this late
	reply   func(Request, []byte) bool
	dropped chan Request
}

// DropReplies makes the proxy lose the reply of each of the next n
// requests that match (n < 0: every one until Stop): the request reaches
// the server, which applies it and answers; the proxy throws the answer
// away and closes the connection, so the client sees its connection break
// without knowing the outcome. Each lost reply's request is sent on
// Dropped.
func (p *Proxy) DropReplies(match func(Request) bool, n int) *DropRule {
	d := &DropRule{p: p, match: match, left: n, dropped: make(chan Request, 128)}
	p.mu.Lock()
	p.rules = append(p.rules, d)
	p.mu.Unlock()
	return d
}

// Dropped receives the request of each reply the rule lost (or held).
func (d *DropRule) Dropped() <-chan Request { return d.dropped }

// Stop ends the rule; requests already marked still lose their replies.
func (d *DropRule) Stop() {
	d.p.mu.Lock()
	defer d.p.mu.Unlock()
	d.left = 0
}

// ParseErrors returns the errors of connections the proxy could not parse.
func (p *Proxy) ParseErrors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.parseErrs...)
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		c := &pconn{p: p, client: client}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			return
		}
		p.conns[c] = struct{}{}
		partitioned := p.partitioned
		if partitioned {
			c.damaged = true // never connected: it only swallows bytes
		}
		p.mu.Unlock()
		if !partitioned {
			server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
			if err != nil {
				c.close()
				continue
			}
			c.server = server
		}
		f := p.proto.newFramer()
		p.wg.Add(2)
		go c.requests(f)
		go c.replies(f)
	}
}

// pconn is one proxied connection.
type pconn struct {
	p      *Proxy
	client net.Conn
	server net.Conn // nil when accepted during a partition

	// guarded by p.mu
	pending []*pending
	damaged bool // lost bytes to a partition
	raw     bool // unparsable: passed through as bytes
	pubsub  bool // a request subscribed it: a pub/sub connection

	once sync.Once
}

type pending struct {
	req  Request
	drop *DropRule
}

func (c *pconn) close() {
	c.once.Do(func() {
		c.client.Close()
		if c.server != nil {
			c.server.Close()
		}
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// pass reports whether bytes may flow now; if not, the connection is
// marked damaged. p.mu held.
func (c *pconn) passLocked() bool {
	if c.p.partitioned || c.server == nil || c.damaged {
		c.damaged = c.damaged || c.p.partitioned || c.server == nil
		return !c.damaged
	}
	return true
}

func (c *pconn) parseError(dir string, err error) {
	c.p.mu.Lock()
	c.raw = true
	c.pending = nil
	c.p.parseErrs = append(c.p.parseErrs, fmt.Errorf("%s %s: %w", c.p.target, dir, err))
	c.p.mu.Unlock()
}

// requests forwards client → server, noting each request that awaits a
// reply, and marking those whose reply a drop rule claims.
func (c *pconn) requests(f framer) {
	defer c.p.wg.Done()
	defer c.close()
	br := bufio.NewReaderSize(c.client, 64<<10)
	for {
		c.p.mu.Lock()
		raw := c.raw
		c.p.mu.Unlock()
		if raw {
			c.pipeRaw(br, c.server)
			return
		}
		frame, req, expect, err := f.readRequest(br)
		read := time.Now()
		if err != nil {
			if !isParseError(err) {
				return
			}
			c.parseError("request", err)
			if c.forward(frame, c.server) != nil {
				return
			}
			continue
		}
		c.p.mu.Lock()
		d := c.delaysLocked().req
		c.pubsub = c.pubsub || req.Subscribes
		c.p.mu.Unlock()
		hold(read, d)
		c.p.mu.Lock()
		if !c.passLocked() {
			c.p.mu.Unlock()
			continue
		}
		if expect && !c.raw {
			pd := &pending{req: req}
			for _, d := range c.p.rules {
				if d.left != 0 && d.match(req) {
					d.left--
					pd.drop = d
					break
				}
			}
			c.pending = append(c.pending, pd)
		}
		c.p.mu.Unlock()
		if _, err := c.server.Write(frame); err != nil {
			return
		}
	}
}

// replies forwards server → client, pairing replies with requests and
// losing the ones a drop rule claimed.
func (c *pconn) replies(f framer) {
	defer c.p.wg.Done()
	if c.server == nil {
		return // accepted during a partition: the client waits in vain
	}
	defer c.close()
	br := bufio.NewReaderSize(c.server, 64<<10)
	peek := func() *Request {
		c.p.mu.Lock()
		defer c.p.mu.Unlock()
		if len(c.pending) == 0 {
			return nil
		}
		return &c.pending[0].req
	}
	for {
		c.p.mu.Lock()
		raw := c.raw
		c.p.mu.Unlock()
		if raw {
			c.pipeRaw(br, c.client)
			return
		}
		frame, answers, err := f.readReply(br, peek)
		read := time.Now()
		if err != nil {
			if !isParseError(err) {
				return
			}
			c.parseError("reply", err)
			if c.forward(frame, c.client) != nil {
				return
			}
			continue
		}
		c.p.mu.Lock()
		d := c.delaysLocked().rep
		var pd *pending
		if i := c.answeredLocked(f, answers); i >= 0 {
			pd = c.pending[i]
			c.pending = slices.Delete(c.pending, i, i+1)
		}
		held := pd != nil && pd.drop != nil && pd.drop.hold > 0 && pd.holdsLocked(frame)
		push := c.pushRuleLocked(f, frame, answers)
		c.p.mu.Unlock()
		if push != nil {
			push.reportPush(frame)
			continue // lost whole: the stream goes on without it
		}
		if pd != nil && pd.drop != nil && pd.drop.hold > 0 {
			if held {
				d = max(d, pd.drop.hold)
				pd.report()
			}
			pd.drop = nil // held, then delivered, or passed
		}
		hold(read, d)
		c.p.mu.Lock()
		pass := c.passLocked()
		c.p.mu.Unlock()
		if !pass {
			continue
		}
		if pd != nil && pd.drop != nil {
			pd.report()
			return // the deferred close breaks the connection
		}
		if _, err := c.client.Write(frame); err != nil {
			return
		}
	}
}

// forward writes b to w unless the connection is cut off.
func (c *pconn) forward(b []byte, w io.Writer) error {
	c.p.mu.Lock()
	pass := c.passLocked()
	c.p.mu.Unlock()
	if !pass || len(b) == 0 {
		return nil
	}
	_, err := w.Write(b)
	return err
}

// pipeRaw copies bytes unparsed, still honouring partitions.
func (c *pconn) pipeRaw(r io.Reader, w io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && c.forward(buf[:n], w) != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// errParse marks a frame the proxy could not parse.
var errParse = errors.New("chaos proxy: cannot parse")

func isParseError(err error) bool { return errors.Is(err, errParse) }

func parseErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errParse}, args...)...)
}

// streamer is a framer whose replies answer requests by stream (gRPC's
// HTTP/2), not in order.
type streamer interface{ replyStream() uint32 }

// answeredLocked is the index in c.pending of the request the reply just
// read answers, or -1. p.mu held.
func (c *pconn) answeredLocked(f framer, answers bool) int {
	if !answers || len(c.pending) == 0 {
		return -1
	}
	s, ok := f.(streamer)
	if !ok {
		return 0
	}
	id := s.replyStream()
	return slices.IndexFunc(c.pending, func(pd *pending) bool { return pd.req.Stream == id })
}
