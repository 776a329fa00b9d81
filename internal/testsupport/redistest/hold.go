package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HoldingProxy forwards TCP connections to a Redis server; while Hold is
// set it holds every reply (the server has run the command, the client
// does not hear of it), and sends them on once it is cleared.
type HoldingProxy struct {
	Hold atomic.Bool
	ln   net.Listener
	to   string
	mu   sync.Mutex
	open []net.Conn
}

// StartHoldingProxy listens on a free local port until t ends.
func StartHoldingProxy(t testing.TB, to string) *HoldingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &HoldingProxy{ln: ln, to: to}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is where clients connect.
func (p *HoldingProxy) Addr() string { return p.ln.Addr().String() }

func (p *HoldingProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.open = append(p.open, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go p.replies(c, s)
	}
}

// replies copies s to c, waiting while Hold is set before each write.
func (p *HoldingProxy) replies(c, s net.Conn) {
	defer c.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		for n > 0 && p.Hold.Load() {
			time.Sleep(time.Millisecond)
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *HoldingProxy) close() {
	p.Hold.Store(false)
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.Close()
	}
}
