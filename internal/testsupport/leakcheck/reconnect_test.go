package leakcheck

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestAudit38BaseClientReconnects: a client made before the Snapshot (a
// conformance harness's own ZooKeeper connection) that reconnects before
// Check, as go-zookeeper does when a reply is later than its read
// deadline on a loaded machine, starts a new reader and writer from its
// loop: they are the harness's, no leak of the code under test. A
// goroutine the test itself starts is still one (TestFindsLeak).
func TestAudit38BaseClientReconnects(t *testing.T) {
	addrs := testserver.SharedZooKeeper(t).Addrs()
	var (
		mu    sync.Mutex
		sock  net.Conn
		dials int
	)
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err == nil {
			mu.Lock()
			sock, dials = c, dials+1
			mu.Unlock()
		}
		return c, err
	}
	conn, _, err := zk.Connect(addrs, 4*time.Second, zk.WithDialer(dial), zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitSession(t, conn)

	base := Take()
	mu.Lock()
	sock.Close() // the reader fails: go-zookeeper dials again
	mu.Unlock()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := dials
		mu.Unlock()
		if n >= 2 && conn.State() == zk.StateHasSession {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no new session within 20 s of the cut (%d dials, state %v)", n, conn.State())
		}
	}
	if err := Check(base); err != nil {
		t.Errorf("the reconnection of a client made before the Snapshot counted as a leak: %v", err)
	}
}

func waitSession(t *testing.T, conn *zk.Conn) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); conn.State() != zk.StateHasSession; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no ZooKeeper session within 20 s: %v", conn.State())
		}
	}
}

// quiet is a zk.Logger that drops go-zookeeper's log lines.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
