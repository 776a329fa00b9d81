package etcd

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestQueueRule runs the queue rule's table and random histories against
// etcd, through the driver's calls on one client, and requires a waiter
// the rule grants to be woken by its watches.
func TestQueueRule(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, lo := newDriver(&Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())})
	d.c, d.owned = rawClient(t, e.Endpoints()), false
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 20, 30)...)
	n := 0
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		n++
		return queuetest.DriverBackend(t, d, fmt.Sprintf("queue-rule/%d", n), time.Minute, 10*time.Second)
	})
}
