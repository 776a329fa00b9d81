package rediswatch

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// auditProxy forwards TCP connections to a Redis server and, on command,
// holds what passes: requests before they reach the server (HoldReq), or
// replies after the server ran the command (HoldReply, or on the
// connections whose last request matched ReplyFilter). A request held
// when its client closes the connection is delivered late when Late is
// set (a copy still in the network), else dropped. It records every
// request chunk it reads, so a test can count what a client sent.
type auditProxy struct {
	HoldReq, HoldReply, Late atomic.Bool
	// Gate holds the late copies until it is cleared.
	Gate atomic.Bool
	// HoldMatch, when set, holds the requests of the first connection to
	// send a chunk that contains it, from that chunk on (once: it is
	// cleared then), as HoldReq does.
	HoldMatch atomic.Pointer[[]byte]
	// ReplyFilter marks the connections whose last request contains it;
	// Freeze holds the replies of those marked at that moment (not of
	// connections made or marked later) until Thaw.
	ReplyFilter atomic.Pointer[[]byte]

	ln    net.Listener
	to    string
	mu    sync.Mutex
	open  map[net.Conn]bool
	state []*connState
	sent  []proxyChunk
	dials atomic.Int64
}

type connState struct{ filtered, frozen atomic.Bool }

// Freeze holds the replies of the connections marked by ReplyFilter now,
// and returns how many.
func (p *auditProxy) Freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, st := range p.state {
		if st.filtered.Load() {
			st.frozen.Store(true)
			n++
		}
	}
	return n
}

// Thaw sends the replies Freeze held.
func (p *auditProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.state {
		st.frozen.Store(false)
	}
}

type proxyChunk struct {
	at   time.Time
	conn int64
	b    []byte
}

func startAuditProxy(t testing.TB, to string) *auditProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &auditProxy{ln: ln, to: to, open: map[net.Conn]bool{}}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *auditProxy) Addr() string { return p.ln.Addr().String() }

// Open returns how many client connections are open.
func (p *auditProxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open) / 2
}

// Count returns how many request chunks read after since contain b.
func (p *auditProxy) Count(b []byte, since time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.sent {
		if !c.at.Before(since) {
			n += bytes.Count(c.b, b)
		}
	}
	return n
}

func (p *auditProxy) accept() {
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
		id := p.dials.Add(1)
		p.mu.Lock()
		p.open[c], p.open[s] = true, true
		st := &connState{}
		p.state = append(p.state, st)
		p.mu.Unlock()
		go p.requests(id, c, s, st)
		go p.replies(c, s, st)
	}
}

func (p *auditProxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.open, c)
	}
}

// requests copies c to s; while HoldReq is set it keeps what it reads.
func (p *auditProxy) requests(id int64, c, s net.Conn, st *connState) {
	var held []byte
	var mu sync.Mutex
	matched := false
	stop := make(chan struct{})
	go func() { // forwards held bytes once HoldReq is cleared
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			mu.Lock()
			if len(held) > 0 && !p.HoldReq.Load() && !matched {
				_, _ = s.Write(held)
				held = nil
			}
			mu.Unlock()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			b := append([]byte(nil), buf[:n]...)
			p.mu.Lock()
			p.sent = append(p.sent, proxyChunk{time.Now(), id, b})
			p.mu.Unlock()
			f := p.ReplyFilter.Load()
			st.filtered.Store(f != nil && bytes.Contains(b, *f))
			m := p.HoldMatch.Load()
			hit := m != nil && bytes.Contains(b, *m) && p.HoldMatch.CompareAndSwap(m, nil)
			mu.Lock()
			matched = matched || hit
			if p.HoldReq.Load() || matched || len(held) > 0 {
				held = append(held, b...)
			} else {
				_, _ = s.Write(b)
			}
			mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	close(stop)
	mu.Lock()
	if len(held) > 0 && p.Late.Load() {
		go func(b []byte) { // a copy in the network, delivered late
			for p.HoldReq.Load() || p.Gate.Load() {
				time.Sleep(time.Millisecond)
			}
			_, _ = s.Write(b)
			time.Sleep(200 * time.Millisecond)
			s.Close()
		}(held)
	} else {
		s.Close()
	}
	mu.Unlock()
	p.forget(c, s)
}

// replies copies s to c, waiting while replies are held.
func (p *auditProxy) replies(c, s net.Conn, st *connState) {
	defer c.Close()
	defer p.forget(c, s)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		for n > 0 && (p.HoldReply.Load() || st.frozen.Load()) {
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

func (p *auditProxy) close() {
	p.HoldReq.Store(false)
	p.HoldReply.Store(false)
	p.Gate.Store(false)
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.state {
		st.frozen.Store(false)
	}
	for c := range p.open {
		c.Close()
	}
}
