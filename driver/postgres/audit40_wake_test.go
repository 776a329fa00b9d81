package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit40HandOverWakes runs the queue table and random histories
// against schema.sql and requires every waiter a Leave makes due to be
// woken by it (hand3, wake3's notification), not left to its next
// check: TestQueueRule's check_turn3 grants it whether or not it was.
func TestAudit40HandOverWakes(t *testing.T) {
	d, lo := newDriver(rawPool(t, serverURL(t)), nil, false)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 20, 30)...)
	run := time.Now().UnixNano()
	n := 0
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		n++
		return queuetest.DriverBackendWaking(t, d, fmt.Sprintf("audit40/%d/%d", run, n), time.Minute, 0, 10*time.Second)
	})
}
