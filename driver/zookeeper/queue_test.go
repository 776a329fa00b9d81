package zookeeper

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestQueueRule runs the queue rule's table and random histories against
// ZooKeeper, through the driver's calls on one connection.
func TestQueueRule(t *testing.T) {
	conn, timeout := rawConn(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout, nil)
	d, lo := newDriver(conn, &Options{Root: testRoot, SessionTimeout: timeout}, nil, nil)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 20, 30)...)
	n := 0
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		n++
		return queuetest.DriverBackend(t, d, fmt.Sprintf("queue-rule/%d/%d", time.Now().UnixNano(), n), time.Minute, 10*time.Second)
	})
}
