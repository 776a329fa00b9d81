package rediswatch

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/lock"
)

// TestQueueRule runs the queue rule's table and random histories against
// the WATCH transactions on a Redis server, through the driver's calls,
// but for the histories where a permit's limit differs from a waiting
// permit's alone: the driver checks the limit against the holders and the
// first waiter, and queues such a permit, to refuse it at its turn.
func TestQueueRule(t *testing.T) {
	core, lo := redisx.NewCore("rediswatch", standalone(t), nil, false)
	d := newDriver(core)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	var cases []queuetest.Case
	for _, c := range append(queuetest.Table, queuetest.Random(1, 40, 40)...) {
		if !queuetest.WaiterConflicts(c) {
			cases = append(cases, c)
		}
	}
	t.Logf("%d histories", len(cases))
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		return queuetest.DriverBackend(t, attemptNow{d}, testKey(t), time.Minute, 0)
	})
}

// attemptNow is the driver whose Check makes the waiter's attempt at
// once, as Check does when a release named the waiter: a waiter the rule
// grants is first in line once those before it are granted, and its
// attempt takes the key.
type attemptNow struct{ *watchDriver }

func (d attemptNow) Check(ctx context.Context, l *driver.Lease) error {
	s := l.Data.(*waiting)
	_, err := d.acquire(ctx, l, queued, s.inbox(), "")
	if err == nil {
		s.stop()
	}
	return err
}
