package redisnx

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestAudit39LaneOptionsRace: run with -race. A lane is made from its
// client's Options (singleLane copies *MaintNotificationsConfig) while
// the client's own first connections run their handshake, which on a
// server without maintenance notifications (Redis 7.0) writes
// MaintNotificationsConfig.Mode under the client's lock, which the lanes
// do not take. Fresh clients, a subscription and lane calls at once: the
// race detector reports the read in singleLane against the write in
// go-redis's initConn. Fixed: lanes make their maintenance-notification settings afresh.
func TestAudit39LaneOptionsRace(t *testing.T) {
	addr := sharedClient(t, nil).Options().Addr
	for i := range 20 {
		c := redis.NewClient(&redis.Options{Addr: addr})
		l := New(c, nil)
		ctx := tctx(t, 10*time.Second)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := fmt.Sprintf("%s/%d/%d", testKey(t), i, g)
				if g == 0 {
					c.Subscribe(ctx, lockKey(DefaultPrefix, k)+channelSuffix).Close()
				}
				if le, err := l.TryLock(ctx, k); err == nil {
					le.Unlock(ctx)
				}
			}()
		}
		wg.Wait()
		l.Close()
		c.Close()
	}
}
