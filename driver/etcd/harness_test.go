package etcd

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// harness connects the conformance suite to etcd. Every Locker dials
// through its own netCut, so that Crash cuts it off the way a dead
// process is: its connections drop and nothing is released.
type harness struct {
	endpoints []string
	raw       *clientv3.Client // the test's own client, for tampering
	prefix    string
	// outage starts a member for the Outage/ subtests (nil: they skip).
	outage func(t *testing.T) *drivertest.Outage
}

func newHarness(t *testing.T, endpoints []string) *harness {
	t.Helper()
	// The tampering client talks to one member: a client of several
	// connects to the others in the background, after its first request,
	// and a leak check's baseline taken meanwhile would count them.
	return &harness{endpoints: endpoints, raw: rawClient(t, endpoints[:1]), prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())}
}

// rawClient is a client straight to the members, closed at cleanup.
func rawClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Connect now: the connection's goroutines must be there before a
	// leak check takes its baseline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "dlock-test-connect"); err != nil {
		t.Fatal(err)
	}
	return c
}

func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	t.Helper()
	opts := &Options{Prefix: h.prefix}
	if o != nil {
		opts.Options = *o
	}
	return newTestLocker(t, h.endpoints, opts, &netCut{})
}

var cuts sync.Map // *lock.Locker -> *netCut

// newTestLocker is a Locker that owns a client of its own, dialing
// through cut.
func newTestLocker(t testing.TB, endpoints []string, opts *Options, cut *netCut) *lock.Locker {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(cut.dial)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	d, lo := newDriver(opts)
	d.c, d.owned = c, true
	l := lock.New(d, lo)
	cuts.Store(l, cut)
	t.Cleanup(func() { l.Close() })
	return l
}

func (h *harness) Crash(t *testing.T, l *lock.Locker) {
	c, ok := cuts.Load(l)
	if !ok {
		t.Fatal("Crash: not a Locker of this harness")
	}
	c.(*netCut).setDown(true)
}

func (h *harness) names(key string) names {
	d, _ := newDriver(&Options{Prefix: h.prefix})
	return d.names(key)
}

func (h *harness) DeleteKey(ctx context.Context, key string) error {
	_, err := h.raw.Delete(ctx, h.names(key).queue, clientv3.WithPrefix())
	return err
}

// StealKey replaces the key's entries with a foreign one (a key of no
// dlock form, as a concurrency.Mutex writes), on a lease of a minute.
func (h *harness) StealKey(ctx context.Context, key string) error {
	n := h.names(key)
	g, err := h.raw.Grant(ctx, 60)
	if err != nil {
		return err
	}
	if _, err := h.raw.Delete(ctx, n.queue, clientv3.WithPrefix()); err != nil {
		return err
	}
	_, err = h.raw.Put(ctx, n.queue+"intruder", "", clientv3.WithLease(g.ID))
	return err
}

func (h *harness) DeleteCounter(ctx context.Context, key string) error {
	_, err := h.raw.Delete(ctx, h.names(key).counter)
	return err
}

func (h *harness) Residue(ctx context.Context, key string) ([]string, error) {
	resp, err := h.raw.Get(ctx, h.names(key).queue, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%s = %q", kv.Key, kv.Value))
	}
	return out, nil
}

func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	n := h.names(key)
	var out []string
	for _, k := range []string{n.queue, n.counter} {
		opts := []clientv3.OpOption{}
		if k == n.queue {
			opts = append(opts, clientv3.WithPrefix())
		}
		resp, err := h.raw.Get(ctx, k, opts...)
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			out = append(out, fmt.Sprintf("%s = %q mod=%d lease=%x", kv.Key, kv.Value, kv.ModRevision, kv.Lease))
		}
	}
	return out, nil
}

func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{
		MinTTL: MinTTL, Notify: true, Shared: true, DeletableCounter: true, Resume: true, Reentry: true, Permits: true,
		Notes: true, Inspect: &drivertest.InspectCaps{Tokens: true, SharedTokens: true, Since: true, Waiters: true, WaiterSince: true, ExpiryLag: ExpiryLag},
		Outage: h.outage,
	}
}

// netCut is a gRPC dialer whose connections a test can cut: setDown(true)
// drops them and refuses new ones (a crash, or a partition until
// setDown(false)).
type netCut struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (n *netCut) dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, fmt.Errorf("netcut: %s cut by the test", addr)
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	n.conns = append(n.conns, c)
	return c, nil
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
