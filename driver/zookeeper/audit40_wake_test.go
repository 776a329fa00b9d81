package zookeeper

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit40HandOverWakes runs the queue table and random histories
// against ZooKeeper and requires every waiter a Leave makes due to be
// woken by its watches before any Check.
func TestAudit40HandOverWakes(t *testing.T) {
	conn, timeout := rawConn(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout, nil)
	d, lo := newDriver(conn, &Options{Root: testRoot, SessionTimeout: timeout}, nil, nil)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 20, 30)...)
	n := 0
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		n++
		return queuetest.DriverBackendWaking(t, d, fmt.Sprintf("audit40/%d/%d", time.Now().UnixNano(), n), time.Minute, 10*time.Second, 10*time.Second)
	})
}
