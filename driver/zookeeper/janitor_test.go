package zookeeper

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// slowConn hands on what the server sends only delay after it arrived, in
// order: every reply comes delay late, as over a slow link.
type slowConn struct {
	net.Conn
	delay time.Duration
	once  sync.Once
	in    chan slowChunk
	buf   []byte
	err   error
}

type slowChunk struct {
	b   []byte
	at  time.Time
	err error
}

func (c *slowConn) pump() {
	for {
		b := make([]byte, 64<<10)
		n, err := c.Conn.Read(b)
		c.in <- slowChunk{b[:n], time.Now().Add(c.delay), err}
		if err != nil {
			close(c.in)
			return
		}
	}
}

func (c *slowConn) Read(p []byte) (int, error) {
	c.once.Do(func() { go c.pump() })
	for len(c.buf) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		ch, ok := <-c.in
		if !ok {
			return 0, net.ErrClosed
		}
		time.Sleep(time.Until(ch.at))
		c.buf, c.err = ch.b, ch.err
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// TestJanitorOverSlowReplies: with every reply late (here 250 ms, a
// tenth of the session timeout), a node whose clean-up fell to the
// janitor (a create whose reply was lost, its by-owner release timed out)
// is deleted within a few round trips, however many other orphans the
// janitor holds: by-owner orphans of attempts that left nothing (each
// costs a sync and a listing) are not worked off one after the other
// under one deadline, ahead of it. A failed set attempt adopts such
// orphans for every member and every release attempt, so behind them a
// member's node stayed at the head of its key's queue for many seconds.
func TestJanitorOverSlowReplies(t *testing.T) {
	const delay = 250 * time.Millisecond
	servers := testserver.SharedZooKeeper(t).Addrs()
	d := newTestDriver(t, servers, &Options{Root: testRoot, SessionTimeout: testSessionTimeout,
		Dialer: func(network, addr string, timeout time.Duration) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, timeout)
			if err != nil {
				return nil, err
			}
			return &slowConn{Conn: c, delay: delay, in: make(chan slowChunk, 1024)}, nil
		}})
	ctx := context.Background()
	k := uniqueKey(t)
	l := newLease(k, driver.Exclusive)
	if err := d.Acquire(ctx, l); err != nil {
		t.Fatal(err)
	}
	g := l.Data.(*grant)
	// Many orphans of owners with no node, then the node's, by owner.
	for range 30 {
		d.mon.adopt(&orphan{keyPath: d.keyPath(uniqueKey(t)), owner: newLease(k, driver.Exclusive).Owner})
	}
	d.mon.remove(l)
	d.mon.adopt(&orphan{keyPath: d.keyPath(k), owner: l.Owner})
	start := time.Now()
	for {
		ok, _, err := d.conn.Exists(g.path)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Since(start) > 2*testSessionTimeout {
			t.Fatalf("node %s still there %v after it was handed to the janitor (replies %v late)", g.path, time.Since(start).Round(time.Millisecond), delay)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("deleted after %v", time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(g.path, d.keyPath(k)) {
		t.Fatalf("path %s", g.path)
	}
}
