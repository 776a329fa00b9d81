package redisnx

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScriptCallsAfterFlush: acquire.lua and release.lua, sent as EVALSHA
// by scriptCall, are sent whole (EVAL) when the server has lost them
// (SCRIPT FLUSH, a restart), as Script.Run sends them; on lanes (single)
// and without (Cluster), whose arguments differ (see scriptCall).
func TestScriptCallsAfterFlush(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		l := newTestLocker(t, c, nil)
		ctx := tctx(t, 10*time.Second)
		k := testKey(t)
		for range 2 {
			flushScripts(t, c)
			lease, err := l.TryLock(ctx, k)
			if err != nil {
				t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
			}
			flushScripts(t, c)
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
			}
		}
		if n, err := c.Exists(ctx, lockKey(DefaultPrefix, k)).Result(); err != nil || n != 0 {
			t.Errorf("lock key after Unlock: EXISTS = %d, %v; want 0", n, err)
		}
	})
}
