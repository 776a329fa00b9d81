package zookeeper

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit40Mixed runs writers, readers and permits of 2 on one key
// through three sessions at once: no two holders the rule excludes, no
// waiter left waiting for its watches (a call over 15 s).
func TestAudit40Mixed(t *testing.T) {
	addrs := testserver.SharedZooKeeper(t).Addrs()
	var lockers []*lock.Locker
	for range 3 {
		conn, timeout := rawConn(t, addrs, testSessionTimeout, nil)
		d, lo := newDriver(conn, &Options{Root: testRoot, SessionTimeout: timeout}, nil, nil)
		l := lock.New(d, lo)
		t.Cleanup(func() { l.Close() })
		lockers = append(lockers, l)
	}
	queuetest.Mixed(t, lockers, fmt.Sprintf("audit40/mixed/%d", time.Now().UnixNano()), 12, 2, 8*time.Second, 15*time.Second)
}
