package rediswatch

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit40HandOverWakes is TestQueueRule requiring every waiter a
// Leave makes due to be woken by it (named by the release), not left to
// its next heartbeat: attemptNow's Check takes the key whether or not it
// was.
func TestAudit40HandOverWakes(t *testing.T) {
	core, lo := redisx.NewCore("rediswatch", standalone(t), nil, false)
	d := newDriver(core)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	var cases []queuetest.Case
	for _, c := range append(queuetest.Table, queuetest.Random(1, 20, 30)...) {
		if !queuetest.WaiterConflicts(c) {
			cases = append(cases, c)
		}
	}
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		return queuetest.DriverBackendWaking(t, attemptNow{d}, testKey(t), time.Minute, 0, 10*time.Second)
	})
}
