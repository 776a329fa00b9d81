package redisnx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// testKey returns a key unique to this test run.
func testKey(t testing.TB) string {
	return fmt.Sprintf("redisnx-test/%d/%s", time.Now().UnixNano(), t.Name())
}

func tctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sharedClient returns a client of the shared single server, closed at
// cleanup.
func sharedClient(t testing.TB, o *redis.Options) *redis.Client {
	if o == nil {
		o = &redis.Options{}
	}
	o.Addr = testserver.SharedRedis(t).Addr()
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// sharedCluster returns a client of the shared Cluster, closed at cleanup.
func sharedCluster(t testing.TB) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testserver.SharedRedisCluster(t).Addrs()})
	t.Cleanup(func() { c.Close() })
	return c
}

// topologies runs fn against the single server and against the Cluster.
func topologies(t *testing.T, fn func(t *testing.T, c redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) { fn(t, sharedClient(t, nil)) })
	t.Run("cluster", func(t *testing.T) { fn(t, sharedCluster(t)) })
}

// newTestLocker returns a Locker over c, closed at cleanup.
func newTestLocker(t testing.TB, c redis.UniversalClient, o *Options) *lock.Locker {
	l := New(c, o)
	hookLanes(c, lanesOf(t, l))
	t.Cleanup(func() { l.Close() })
	return l
}

// counter counts the scripts a client runs (EVAL and EVALSHA), and the
// pipelines that hold some.
type counter struct{ cmds, batched, pipelines atomic.Int64 }

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "eval" || cmd.Name() == "evalsha" }

func (h *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := int64(0)
		for _, c := range cmds {
			if isScript(c) {
				n++
			}
		}
		if n > 0 {
			h.pipelines.Add(1)
			h.cmds.Add(n)
			h.batched.Add(n)
		}
		return next(ctx, cmds)
	}
}

// pubsubClients returns the ids of the connections named name that hold
// subscriptions.
func pubsubClients(t testing.TB, c *redis.Client, name string) []string {
	t.Helper()
	list, err := c.ClientList(tctx(t, 10*time.Second)).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] == name && f["sub"] != "" && f["sub"] != "0" {
			ids = append(ids, f["id"])
		}
	}
	return ids
}

// eventually polls cond every 10ms until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func isNotAcquired(err error) bool { return errors.Is(err, lock.ErrNotAcquired) }

// cloneClient returns a new client of the same kind and servers as c, with
// the connection name name, closed at cleanup.
func cloneClient(t testing.TB, c redis.UniversalClient, name string) redis.UniversalClient {
	var n redis.UniversalClient
	switch c := c.(type) {
	case *redis.ClusterClient:
		n = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Options().Addrs, ClientName: name})
	case *redis.Client:
		n = redis.NewClient(&redis.Options{Addr: c.Options().Addr, ClientName: name})
	default:
		t.Fatalf("cloneClient: %T", c)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// newLocker is New, or, with owns set, a Locker that owns its client as
// one opened from a URL does.
func newLocker(client redis.UniversalClient, o *Options, owns bool) *lock.Locker {
	core, lo := redisx.NewCore("redisnx", client, o, owns)
	hookLanes(client, core.Lanes)
	return lock.New(newDriver(core), lo)
}

// testDriver is the driver of New(client, nil), for tests that call it
// directly.
func testDriver(client redis.UniversalClient) *redisDriver {
	core, _ := redisx.NewCore("redisnx", client, nil, false)
	hookLanes(client, core.Lanes)
	d := newDriver(core)
	d.inline = false // the follow-up's goroutine: tests step it by hand
	return d
}

// inlineDriver is testDriver with inline steps (inline.go), as New makes
// it over a *redis.Client.
func inlineDriver(t testing.TB, client *redis.Client) *redisDriver {
	d := testDriver(client)
	if d.inline = d.Lanes.ReturnsAtContextEnd(); !d.inline {
		t.Fatal("no lanes over a *redis.Client")
	}
	return d
}

// laneHooks are the hooks tests put on a client for the lanes of the
// drivers made over it here (redisx.Lanes: the client's own hooks do not
// see the lanes' commands).
var laneHooks struct {
	sync.Mutex
	m map[redis.UniversalClient][]redis.Hook
}

// addHook adds h to c, and to the lanes of the drivers made over c from
// now on.
func addHook(c redis.UniversalClient, h redis.Hook) {
	c.AddHook(h)
	laneHooks.Lock()
	defer laneHooks.Unlock()
	if laneHooks.m == nil {
		laneHooks.m = map[redis.UniversalClient][]redis.Hook{}
	}
	laneHooks.m[c] = append(laneHooks.m[c], h)
}

func hookLanes(c redis.UniversalClient, ls *redisx.Lanes) {
	laneHooks.Lock()
	defer laneHooks.Unlock()
	for _, h := range laneHooks.m[c] {
		ls.AddHook(h)
	}
}

// lanesOf returns l's lanes.
func lanesOf(t testing.TB, l *lock.Locker) *redisx.Lanes {
	var ls *redisx.Lanes
	if !l.As(&ls) {
		t.Fatal("no lanes")
	}
	return ls
}
