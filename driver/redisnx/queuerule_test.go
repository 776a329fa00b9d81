package redisnx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/lock"
)

// TestQueueRule runs the queue rule's table and random histories against
// the scripts on a Redis server, through the driver's calls: wait.lua
// queues an entry and takes the key when the rule grants it, acquire.lua
// tries, release.lua hands over, leave.lua leaves.
func TestQueueRule(t *testing.T) {
	core, lo := redisx.NewCore("redisnx", sharedClient(t, nil), nil, false)
	d := newDriver(core)
	d.inline = false // a Check runs wait.lua and returns: no BLPOP blocks it
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	cases := append(queuetest.Table, queuetest.Random(1, 30, 40)...)
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend {
		return queuetest.DriverBackend(t, queueAtOnce{d}, testKey(t), time.Minute, 0)
	})
}

// queueAtOnce is the driver whose Join runs wait.lua at once, as Join
// does once the key's channel is confirmed: the entry's place in the queue
// is then the step's.
type queueAtOnce struct{ *redisDriver }

func (d queueAtOnce) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	err := d.redisDriver.Join(ctx, l, wake)
	var held *driver.HeldError
	if s, ok := l.Data.(*waiting); ok && !s.queued && errors.As(err, &held) {
		return d.wait(ctx, l, s)
	}
	return err
}
