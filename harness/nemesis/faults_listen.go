package nemesis

import (
	"context"
	"strings"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// listen-loss: the listener marks P{K}:l (internal/redisx's
// Core.Subscribe: a waiter with a retry strategy, a named owner's Lock or
// an Observe subscribed to the key's channel) are deleted on every server,
// as an eviction or a restart without persistence would. redisnx's
// uncontended release then publishes nothing until the mark is written
// again (renewed every 20 s, or by the next subscription): the subscribers
// find the key free at their next retry. A mark is only a hint of who
// listens, and no wake-up grants anything, so its loss may slow waiters
// but never break a lease.

// listenKinds adds listen-loss on the redisnx targets.
func (n *nemesis) listenKinds(add func(name string, w int, inject func() bool)) {
	if n.r.tg.Backend != chaos.RedisBackend || !strings.HasPrefix(n.r.tg.Name, "redisnx") {
		return
	}
	add("listen-loss", 2, n.listenLoss)
}

// listenLoss deletes every listener mark on every server.
func (n *nemesis) listenLoss() bool {
	n.spawn(func() {
		for _, addr := range n.r.srv.Addrs {
			c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			iter := c.Scan(ctx, 0, "*"+redisx.ListenSuffix, 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			cancel()
			c.Close()
		}
	})
	return true
}
