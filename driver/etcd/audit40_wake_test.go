package etcd

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit40HandOverWakes runs the queue table and random histories
// against etcd and requires every waiter a Leave makes due to be woken by
// its watches before any Check: Check reads the queue whether or not a
// watch fired, so TestQueueRule passes with a watch set that misses the
// waiter's turn (a permit watching one of its N permits).
func TestAudit40HandOverWakes(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, lo := newDriver(&Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())})
	d.c, d.owned = rawClient(t, e.Endpoints()), false
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 20, 30)...)
	n := 0
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		n++
		return queuetest.DriverBackendWaking(t, d, fmt.Sprintf("audit40/%d", n), time.Minute, 10*time.Second, 10*time.Second)
	})
}
