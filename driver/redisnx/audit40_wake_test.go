package redisnx

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit40HandOverWakes runs the queue table and random histories
// against the scripts and requires every waiter a Leave makes due to be
// woken by it (handed the key by release.lua's handover, or told), not
// left to its next heartbeat: TestQueueRule's Check takes the key itself,
// so a handover that stops short passes it.
func TestAudit40HandOverWakes(t *testing.T) {
	core, lo := redisx.NewCore("redisnx", sharedClient(t, nil), nil, false)
	d := newDriver(core)
	d.inline = false
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 20, 30)...)
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		return queuetest.DriverBackendWaking(t, queueAtOnce{d}, testKey(t), time.Minute, 0, 10*time.Second)
	})
}
