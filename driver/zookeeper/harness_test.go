package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

const testRoot = "/dlock-test"

// harness connects the conformance suite to ZooKeeper servers. Every
// Locker dials through its own netCut, so that Crash can cut it off the
// way a dead process is: its TCP connections drop without a closeSession,
// and the server expires the session after its timeout.
type harness struct {
	servers []string
	timeout time.Duration // negotiated
	raw     *zk.Conn      // the test's own connection, for tampering

	mu   sync.Mutex
	cuts map[*lock.Locker]*netCut

	// outage starts a server for the Outage/ subtests (nil: they skip).
	outage func(t *testing.T) *drivertest.Outage
}

func newHarness(t *testing.T, servers []string, timeout time.Duration) *harness {
	raw, negotiated := rawConn(t, servers, timeout, nil)
	return &harness{servers: servers, timeout: negotiated, raw: raw, cuts: map[*lock.Locker]*netCut{}}
}

// rawConn connects to servers with a plain go-zookeeper connection, closed
// at cleanup, and returns it with its negotiated session timeout.
func rawConn(t testing.TB, servers []string, timeout time.Duration, dialer zk.Dialer) (*zk.Conn, time.Duration) {
	t.Helper()
	nt := newNegotiatedTimeout()
	if dialer == nil {
		dialer = net.DialTimeout
	}
	c, _, err := zk.Connect(servers, timeout, zk.WithDialer(nt.wrapDialer(dialer)), zk.WithLogInfo(false), zk.WithLogger(zkLogger{}))
	if err != nil {
		t.Fatalf("zk.Connect: %v", err)
	}
	t.Cleanup(c.Close)
	select {
	case <-nt.ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("no ZooKeeper session within 20s")
	}
	for c.State() != zk.StateHasSession {
		time.Sleep(5 * time.Millisecond)
	}
	return c, nt.get()
}

func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	t.Helper()
	n := &netCut{}
	opts := &Options{Root: testRoot, SessionTimeout: h.timeout, Dialer: n.dial}
	if o != nil {
		opts.Options = *o
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Dial(ctx, h.servers, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	h.mu.Lock()
	h.cuts[l] = n
	h.mu.Unlock()
	return l
}

func (h *harness) Crash(t *testing.T, l *lock.Locker) {
	h.mu.Lock()
	n := h.cuts[l]
	h.mu.Unlock()
	if n == nil {
		t.Fatalf("not a Locker of this harness")
	}
	n.setDown(true)
}

func (h *harness) kp(key string) string { return keyPath(testRoot, key) }

// children lists the nodes of key's queue after a sync: in an ensemble the
// raw connection's server may not yet have applied a grant that another
// server answered, and a stale listing would leave that grant in place
// (DeleteKey) or miss it (Residue).
func (h *harness) children(key string) ([]string, error) {
	if _, err := h.raw.Sync(h.kp(key)); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	children, _, err := h.raw.Children(h.kp(key))
	return children, err
}

func (h *harness) DeleteKey(ctx context.Context, key string) error {
	children, err := h.children(key)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := h.raw.Delete(h.kp(key)+"/"+c, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	return nil
}

// StealKey replaces the grants with a node of a foreign owner, named as
// zk.Lock names its nodes, in the harness's session.
func (h *harness) StealKey(ctx context.Context, key string) error {
	if err := h.DeleteKey(ctx, key); err != nil {
		return err
	}
	var b [16]byte
	rand.Read(b[:])
	_, err := h.raw.Create(h.kp(key)+"/_c_"+hex.EncodeToString(b[:])+"-lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	return err
}

func (h *harness) DeleteCounter(ctx context.Context, key string) error {
	return errors.New("the fencing token is the node's czxid: there is no counter")
}

func (h *harness) Residue(ctx context.Context, key string) ([]string, error) {
	children, err := h.children(key)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return children, err
}

func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{SessionBound: true, SessionTimeout: h.timeout, Notify: true, Shared: true, Permits: true, Notes: true, Inspect: inspectCaps, Outage: h.outage}
}

// netCut is a zk.Dialer whose connections a test can cut: setDown(true)
// drops them and refuses new ones (a crash, or a partition until
// setDown(false)); loseCreateReply makes the next create (or multi) request's
// connection drop right after the request is sent, so that its reply is
// lost while the server applies it.
type netCut struct {
	mu       sync.Mutex
	down     bool
	conns    []*cutConn
	dropNext atomic.Int32
	dropped  atomic.Int32
}

var errCut = errors.New("netcut: connection cut by the test")

func (n *netCut) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, errCut
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	cc := &cutConn{Conn: c, n: n}
	n.conns = append(n.conns, cc)
	return cc, nil
}

func (n *netCut) setDown(down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = down
	if down {
		for _, c := range n.conns {
			c.Close()
		}
		n.conns = nil
	}
}

// loseCreateReply arranges for the reply of the next create to be lost.
func (n *netCut) loseCreateReply() { n.dropNext.Add(1) }

type cutConn struct {
	net.Conn
	n      *netCut
	writes int
	deaf   atomic.Bool
}

// ZooKeeper's opcodes of the requests that create lock nodes.
const (
	opCreate = 1
	opMulti  = 14
)

func (c *cutConn) Write(p []byte) (int, error) {
	c.writes++
	// go-zookeeper writes one frame per Write: length, xid, opcode, ...
	// The first frame is the connect request, without a header.
	if c.writes > 1 && len(p) >= 12 && c.n.dropNext.Load() > 0 {
		if op := int32(binary.BigEndian.Uint32(p[8:12])); op != opCreate && op != opMulti {
			return c.Conn.Write(p)
		}
		c.n.dropNext.Add(-1)
		c.n.dropped.Add(1)
		c.deaf.Store(true) // swallow the reply, then drop the connection
		n, err := c.Conn.Write(p)
		time.AfterFunc(100*time.Millisecond, func() { c.Conn.Close() })
		return n, err
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if c.deaf.Load() && err == nil {
			continue
		}
		if c.deaf.Load() {
			return 0, err
		}
		return n, err
	}
}
