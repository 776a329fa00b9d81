package redisnx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A grant whose reply never came (the server stalled past the client's
// read timeout, the caller gave up) leaves no held key behind once the
// server runs again, whatever order it runs the queued grant requests
// (go-redis resends them) and the clean-up in.
//
// The client keeps idle connections ready, so that the requests made during
// the stall reach the server (a new connection would wait for its HELLO
// reply and send nothing): the replies are lost, the requests are not. A
// clean-up that cannot reach the server before it gives up is a documented
// limit: the key is then held until its TTL.
func TestLostReplyLeavesNoKey(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cancel, shared bool
	}{{"timeout", false, false}, {"cancelled", true, false}, {"shared/timeout", false, true}, {"shared/cancelled", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c, raw := stallable(t)
			l := newTestLocker(t, c, &Options{Options: lockOpts(time.Minute)})
			k := testKey(t)
			rk := lockKey(DefaultPrefix, k)
			// Load the scripts, so that the grant is one EVALSHA.
			if lease, err := l.TryLock(tctx(t, 10*time.Second), k); err != nil {
				t.Fatalf("TryLock: %v", err)
			} else {
				lease.Unlock(tctx(t, 10*time.Second))
			}

			err := duringStall(t, srv, tc.cancel, func(ctx context.Context) (err error) {
				if tc.shared {
					_, err = l.TryRLock(ctx, k)
				} else {
					_, err = l.TryLock(ctx, k)
				}
				return err
			})
			if !errors.Is(err, lock.ErrNotAcquired) || (tc.cancel && !errors.Is(err, context.Canceled)) {
				t.Errorf("TryLock against a stalled server: err = %v, want ErrNotAcquired (and the context's error)", err)
			}
			// Either a queued grant ran (the counter exists) and was
			// removed again, or the clean-up ran first (the tombstone
			// exists) and the grants changed nothing.
			if !eventually(5*time.Second, func() bool {
				n, err := raw.Exists(context.Background(), rk, rk+readersSuffix).Result()
				return err == nil && n == 0
			}) {
				ttl, _ := raw.PTTL(context.Background(), rk).Result()
				t.Fatalf("the lock key is still held after the stalled grant (PTTL %v)", ttl)
			}
			counted, _ := raw.Exists(context.Background(), rk+counterSuffix).Result()
			voided, _ := raw.Keys(context.Background(), rk+redisx.VoidInfix+"*").Result()
			t.Logf("granted and removed: %v; tombstones: %d", counted == 1, len(voided))
			if counted == 0 && len(voided) == 0 {
				t.Errorf("neither the grant nor the clean-up reached the server")
			}
			other := newTestLocker(t, raw, nil)
			lease, err := other.TryLock(tctx(t, 10*time.Second), k)
			if err != nil {
				t.Fatalf("the key is not free after the stalled grant: %v", err)
			}
			lease.Unlock(tctx(t, 10*time.Second))
		})
	}
}

// stallable starts a server of its own that the test may pause, and
// returns it with a client whose replies time out after 200 ms (its
// connections made beforehand, so that requests sent during a pause reach
// the server) and a plain client.
func stallable(t *testing.T) (*testserver.Redis, *redis.Client, *redis.Client) {
	srv := testserver.StartRedis(t, nil)
	srv.RequireFaults(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	warm(t, c, 12)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { raw.Close() })
	return srv, c, raw
}

// duringStall pauses srv, runs try with a context of 20 seconds (cancelled
// after 100 ms if cancel is set), resumes srv, and returns try's error.
func duringStall(t *testing.T, srv *testserver.Redis, cancel bool, try func(ctx context.Context) error) error {
	t.Helper()
	if err := srv.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(stop)
	if cancel {
		time.AfterFunc(100*time.Millisecond, stop)
	}
	err := try(ctx)
	if err := srv.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	return err
}

func lockOpts(ttl time.Duration) lock.Options { return lock.Options{TTL: ttl} }

// warm leaves n connections of c in its pool, each past its handshake.
func warm(t *testing.T, c *redis.Client, n int) {
	var conns []*redis.Conn
	for range n {
		cn := c.Conn()
		if err := cn.Ping(tctx(t, 10*time.Second)).Err(); err != nil {
			t.Fatalf("PING: %v", err)
		}
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		cn.Close()
	}
}
