package postgres

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgProxy is a TCP proxy between a Locker's connections and the server
// that can hold back what clients send (hold) and deliver it later
// (deliver), even after the client gave up on the connection: the bytes
// a client wrote before it closed are in the network, and reach the
// server late, followed by the close (a half-close, so that the server
// still runs what it got).
type pgProxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns []*proxyConn
}

type proxyConn struct {
	p      *pgProxy
	client net.Conn
	server *net.TCPConn

	// under p.mu
	hold       bool
	pending    []byte
	clientGone bool
	holdDown   bool   // replies held back (holdReplies)
	pendDown   []byte // what the server sent while held
}

func newPGProxy(t testing.TB, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{target: target, ln: ln}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
	})
	return p
}

func (p *pgProxy) addr() string { return p.ln.Addr().String() }

func (p *pgProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pc := &proxyConn{p: p, client: c, server: s.(*net.TCPConn)}
		p.mu.Lock()
		p.conns = append(p.conns, pc)
		p.mu.Unlock()
		go pc.up()
		go pc.down()
	}
}

// up copies client to server, keeping what arrives while held.
func (c *proxyConn) up() {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.client.Read(buf)
		c.p.mu.Lock()
		if n > 0 {
			if c.hold {
				c.pending = append(c.pending, buf[:n]...)
			} else {
				c.server.Write(buf[:n])
			}
		}
		if err != nil {
			c.clientGone = true
			if !c.hold {
				c.server.CloseWrite()
			}
			c.p.mu.Unlock()
			return
		}
		c.p.mu.Unlock()
	}
}

// down copies server to client; once the client is gone it drains what
// the server still sends.
func (c *proxyConn) down() {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.server.Read(buf)
		c.p.mu.Lock()
		if n > 0 && c.holdDown {
			c.pendDown = append(c.pendDown, buf[:n]...)
			n = 0
		}
		c.p.mu.Unlock()
		if n > 0 {
			c.client.Write(buf[:n]) // an error: the client is gone, drain on
		}
		if err != nil {
			c.client.Close()
			return
		}
	}
}

// holdAll holds back what every connection open now sends from now on;
// connections made later pass.
func (p *pgProxy) holdAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.hold = true
	}
}

// holdReplies holds back what the server sends on every connection
// open now, from now on (the requests pass); deliverReplies sends it on.
func (p *pgProxy) holdReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.holdDown = true
	}
}

func (p *pgProxy) deliverReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.client.Write(c.pendDown)
		c.pendDown, c.holdDown = nil, false
	}
}

// heldBytes is how many bytes are held back.
func (p *pgProxy) heldBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		n += len(c.pending)
	}
	return n
}

// deliver sends what was held, and ends holding; a connection whose
// client is gone is then half-closed toward the server.
func (p *pgProxy) deliver() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if len(c.pending) > 0 {
			c.server.Write(c.pending)
			c.pending = nil
		}
		if c.hold && c.clientGone {
			c.server.CloseWrite()
		}
		c.hold = false
	}
}

// proxiedLocker is a Locker whose pool (of at most maxConns connections)
// and listener reach the server through p.
func proxiedLocker(t testing.TB, url string, p *pgProxy, maxConns int32, o *Options) *lock.Locker {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(p.addr())
	if err != nil {
		t.Fatal(err)
	}
	pn, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
	cfg.ConnConfig.Fallbacks = nil
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o == nil {
		o = &Options{}
	}
	d, lo := newDriver(pool, o, true)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	return l
}

// serverAddr is host:port of the server of url.
func serverAddr(t testing.TB, url string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}
