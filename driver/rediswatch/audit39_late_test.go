package rediswatch

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// TestAudit39LateExec: a rediswatch grant is a WATCH, reads, then MULTI
// ... EXEC. The proxy holds the connection's requests from the chunk
// that holds EXEC on (the WATCH and reads went through), the call is
// cancelled (its lane's connection closed), lock cleans up its unknown
// outcome, and only then does the held MULTI ... EXEC reach Redis, on the
// connection that sent the WATCH. The late EXEC must grant nothing: TryLock
// and Lock, with a 1-minute TTL.
func TestAudit39LateExec(t *testing.T) {
	admin := standalone(t)
	proxy := startAuditProxy(t, admin.Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	l, _ := newTestLocker(t, rdb, &Options{Options: lock.Options{TTL: time.Minute}})
	ctx := testCtx(t)
	for _, op := range []string{"TryLock", "Lock"} {
		t.Run(op, func(t *testing.T) {
			k := testKey(t)
			lk := redisx.LockKey(redisx.DefaultPrefix, k)
			exec := []byte("exec")
			proxy.Late.Store(true)
			proxy.Gate.Store(true)
			proxy.HoldMatch.Store(&exec)
			defer func() { proxy.HoldMatch.Store(nil); proxy.Gate.Store(false); proxy.Late.Store(false) }()
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				var err error
				if op == "TryLock" {
					_, err = l.TryLock(cctx, k)
				} else {
					_, err = l.Lock(cctx, k)
				}
				done <- err
			}()
			time.Sleep(200 * time.Millisecond)
			if proxy.HoldMatch.Load() != nil {
				t.Fatal("no EXEC was sent")
			}
			cancel()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("granted with its EXEC held")
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the call did not return after its context was cancelled")
			}
			// The clean-up runs (its own EXEC passes: HoldMatch fired once).
			time.Sleep(time.Second)
			if v := admin.Get(ctx, lk).Val(); v != "" {
				t.Fatalf("the key is held (%q) before the late EXEC", v)
			}
			before := execCalls(ctx, admin)
			proxy.Gate.Store(false)
			time.Sleep(500 * time.Millisecond)
			if n := execCalls(ctx, admin) - before; n < 1 {
				t.Fatalf("the late EXEC did not reach Redis (%d EXEC calls)", n)
			}
			if v := admin.Get(ctx, lk).Val(); v != "" {
				t.Fatalf("the late EXEC of an aborted %s holds the key: %q, PTTL %v", op, v, admin.PTTL(ctx, lk).Val())
			}
		})
	}
}

// execCalls returns how many EXEC calls the server ran.
func execCalls(ctx context.Context, c *redis.Client) int64 {
	for _, line := range strings.Split(c.Info(ctx, "commandstats").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_exec:calls="); ok {
			v, _, _ = strings.Cut(v, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
