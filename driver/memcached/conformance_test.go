package memcached

import (
	"context"
	"errors"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// skips are the subtests memcached cannot run (see Caps): it grants no
// shared leases nor permits (the subtests check that both are refused,
// then skip).
var skips = drivertest.Skips{
	"Shared/ReadersShare":     "no shared leases",
	"Shared/WriterExcludes":   "no shared leases",
	"Shared/WriterNotStarved": "no shared leases",
	"Semaphore/Limit":         "no permits",
	"Semaphore/Contention":    "no permits",
	"Semaphore/LimitMismatch": "no permits",
	"Semaphore/CrashedHolder": "no permits",
	"Semaphore/Cancel":        "no permits",
	"Semaphore/FIFO":          "no permits, and waiters poll",
	"Semaphore/DoneOnDelete":  "no permits",
	"Semaphore/Resume":        "no permits",
	"Inspect/Shared":          "no shared leases nor permits to list",
}

// The conformance tests do not run in parallel: the suite's goroutine-leak
// check would see the other's goroutines.
func TestConformance(t *testing.T) {
	addrs := testserver.SharedMemcached(t).Addrs()
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		h := newHarness(addrs)
		h.outage = outage
		return h
	}, skips)
}

// Two servers: keys spread over both, each lock with its counter. The
// outage checks are TestConformance's, on one server.
func TestConformanceTwoServers(t *testing.T) {
	addrs := testserver.StartMemcached(t, &testserver.MemcachedOptions{Servers: 2}).Addrs()
	two := drivertest.Skips{
		"Outage/LockWaits":    "one server covers it (TestConformance)",
		"Outage/TryLockFails": "one server covers it (TestConformance)",
	}
	maps.Copy(two, skips)
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return newHarness(addrs) }, two)
}

// outage is a harness on a server of the subtest's own, which the suite
// stops and starts.
func outage(t *testing.T) *drivertest.Outage {
	srv := testserver.StartMemcached(t, nil)
	return &drivertest.Outage{Harness: newHarness(srv.Addrs()), Stop: srv.Stop, Start: srv.Restart}
}

type harness struct {
	addrs  []string
	raw    *memcache.Client // tampers, with the same server list
	mu     sync.Mutex
	conns  map[*lock.Locker]*cuttable
	outage func(t *testing.T) *drivertest.Outage
}

func newHarness(addrs []string) *harness {
	return &harness{addrs: addrs, raw: memcache.New(addrs...), conns: map[*lock.Locker]*cuttable{}}
}

func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	cut := &cuttable{}
	c := memcache.New(h.addrs...)
	c.DialContext = cut.dial
	var opts Options
	if o != nil {
		opts.Options = *o
	}
	l := newLocker(c, &opts, true)
	h.mu.Lock()
	h.conns[l] = cut
	h.mu.Unlock()
	t.Cleanup(func() { l.Close() })
	return l
}

// Crash cuts every connection of the Locker's client and refuses new ones,
// as the death of its process would; nothing is released.
func (h *harness) Crash(t *testing.T, l *lock.Locker) {
	h.mu.Lock()
	cut := h.conns[l]
	h.mu.Unlock()
	if cut == nil {
		t.Fatalf("not a Locker of this harness")
	}
	cut.cut()
}

func (h *harness) DeleteKey(ctx context.Context, key string) error {
	if err := h.raw.Delete(mapKey(DefaultPrefix, key).lock); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
		return err
	}
	return nil
}

func (h *harness) StealKey(ctx context.Context, key string) error {
	return h.raw.Set(&memcache.Item{Key: mapKey(DefaultPrefix, key).lock, Value: []byte("intruder"), Expiration: 60})
}

func (h *harness) DeleteCounter(ctx context.Context, key string) error {
	if err := h.raw.Delete(mapKey(DefaultPrefix, key).counter); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
		return err
	}
	return nil
}

func (h *harness) Residue(ctx context.Context, key string) ([]string, error) {
	it, err := h.raw.Get(mapKey(DefaultPrefix, key).lock)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []string{string(it.Value)}, nil
}

// Caps: MinTTL is 5 s, not the driver's 3 s, because the suite wants a
// lease's deadline past half its TTL, and this driver's validity is the TTL
// less 2 s (see clockLoss).
func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{MinTTL: 5 * time.Second, DeletableCounter: true, Resume: true, Reentry: true, Notes: true, Inspect: inspectCaps, Outage: h.outage}
}

// cuttable is a dialer whose connections can all be cut at once.
type cuttable struct {
	mu    sync.Mutex
	dead  atomic.Bool
	conns []net.Conn
}

var errCut = errors.New("connection cut (process crashed by the test)")

func (c *cuttable) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.dead.Load() {
		return nil, errCut
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead.Load() {
		conn.Close()
		return nil, errCut
	}
	c.conns = append(c.conns, conn)
	return conn, nil
}

func (c *cuttable) cut() {
	c.dead.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}
