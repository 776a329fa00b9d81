package etcd

import (
	"net"
	"sync"
	"testing"
	"time"
)

// delayProxy forwards TCP connections to one etcd member, and can hold
// what the server sends for a while (setDelay) or cut everything (cut).
// gRPC runs over one connection, so a delay holds every reply: keep-alive
// replies come late while the requests reach the server at once.
type delayProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	delay  time.Duration
	down   bool
	upDown bool          // what the client sends is dropped
	held   chan struct{} // while set, nothing flows either way; closed by release
	conns  []net.Conn
}

// hold stops every byte both ways, as a paused process's connections
// are: open, and silent, until release.
func (p *delayProxy) hold() {
	p.mu.Lock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	p.mu.Unlock()
}

// release lets what hold stopped flow again, in order.
func (p *delayProxy) release() {
	p.mu.Lock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.mu.Unlock()
}

// wait blocks while the proxy holds.
func (p *delayProxy) wait() {
	p.mu.Lock()
	h := p.held
	p.mu.Unlock()
	if h != nil {
		<-h
	}
}

func newDelayProxy(t *testing.T, target string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// dropRequests drops what the clients send from now on (the requests
// never reach the server), while what the server sent still comes.
func (p *delayProxy) dropRequests() {
	p.mu.Lock()
	p.upDown = true
	p.mu.Unlock()
}

// cut closes every connection and refuses new ones.
func (p *delayProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *delayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.down {
			p.mu.Unlock()
			c.Close()
			if s != nil {
				s.Close()
			}
			continue
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.upstream(c, s)
		go p.delayed(c, s)
	}
}

// upstream copies what the client sends to the server, unless dropped.
func (p *delayProxy) upstream(c, s net.Conn) {
	defer s.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		p.wait()
		p.mu.Lock()
		drop := p.upDown
		p.mu.Unlock()
		if n > 0 && !drop {
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// delayed copies what the server sends to the client, each chunk held
// for the delay in force when it arrived, in order.
func (p *delayProxy) delayed(c, s net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := s.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				q <- chunk{buf[:n], time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		time.Sleep(time.Until(ch.at))
		p.wait()
		if _, err := c.Write(ch.b); err != nil {
			break
		}
	}
	c.Close()
	for range q {
	}
}
