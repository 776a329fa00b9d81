package memory

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
)

// TestQueueRule runs the queue rule's table and random histories against
// a Store.
func TestQueueRule(t *testing.T) {
	cases := append(queuetest.Table, queuetest.Random(1, 40, 40)...)
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		return queuetest.DriverBackend(t, &memDriver{s: NewStore()}, "k", time.Minute, 0)
	})
}
