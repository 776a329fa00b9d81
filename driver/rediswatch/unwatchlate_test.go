package rediswatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// cancelAtUnwatch is a hook that, once armed, cancels the caller's context
// when an UNWATCH is about to be sent, and lets the lane's abort (which
// closes the connection at the context's end) run before it goes on.
type cancelAtUnwatch struct {
	cancel atomic.Pointer[context.CancelFunc]
	at     atomic.Int64 // when it cancelled (unix ns)
}

func (h *cancelAtUnwatch) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cancelAtUnwatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.fire(cmd)
		return next(ctx, cmd)
	}
}

func (h *cancelAtUnwatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			h.fire(cmds[0])
		}
		return next(ctx, cmds)
	}
}

func (h *cancelAtUnwatch) fire(cmd redis.Cmder) {
	if cmd.Name() != "unwatch" {
		return
	}
	if c := h.cancel.Swap(nil); c != nil {
		h.at.Store(time.Now().UnixNano())
		(*c)()
		time.Sleep(5 * time.Millisecond) // the lane's abort runs
	}
}

// A call whose transaction ends with UNWATCH (the key is held: a TryLock,
// a named owner's TryLock) returns by its context's end when the context
// ends just then: on a lane the context's end closes the connection, and
// the UNWATCH, which ran under a context detached from the caller's, went
// on retrying on a connection it could not get back for up to
// unwatchTimeout (the nemesis saw TryLocks 200-300 ms late).
func TestUnwatchReturnsAtContextEnd(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: standalone(t).Options().Addr})
	t.Cleanup(func() { rdb.Close() })
	h := &cancelAtUnwatch{}
	addHook(rdb, h)
	l, d := newTestLocker(t, rdb, nil)
	if !d.Lanes.ReturnsAtContextEnd() {
		t.Fatal("no lanes on a standalone client")
	}
	other, _ := newTestLocker(t, standalone(t), nil)
	for _, named := range []bool{false, true} {
		key := testKey(t)
		held, err := other.TryLock(testCtx(t), key, lock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var worst time.Duration
		for range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			h.cancel.Store(&cancel)
			var opts []lock.Option
			if named {
				opts = append(opts, lock.WithOwner("named"))
			}
			_, err := l.TryLock(ctx, key, opts...)
			end := time.Now()
			cancel()
			if h.cancel.Swap(nil) != nil {
				t.Fatalf("named %v: no UNWATCH sent (err %v)", named, err)
			}
			if err == nil {
				t.Fatalf("named %v: granted a held key", named)
			}
			worst = max(worst, end.Sub(time.Unix(0, h.at.Load())))
		}
		// 5 ms of the hook's own sleep, and room for a loaded machine.
		if worst > 60*time.Millisecond {
			t.Errorf("named %v: TryLock returned %v after its context was cancelled", named, worst)
		}
		_ = held.Unlock(testCtx(t))
	}
}
