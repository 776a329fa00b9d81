package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/lock"
)

// TestQueueRule runs the queue rule's table and random histories against
// the functions of schema.sql on a PostgreSQL server, through the
// driver's calls: acquire3 (Join queues, Try does not), check_turn3,
// release3.
func TestQueueRule(t *testing.T) {
	d, lo := newDriver(rawPool(t, serverURL(t)), nil, false)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 30, 40)...)
	run := time.Now().UnixNano()
	n := 0
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		n++
		return queuetest.DriverBackend(t, d, fmt.Sprintf("queue-rule/%d/%d", run, n), time.Minute, 0)
	})
}
