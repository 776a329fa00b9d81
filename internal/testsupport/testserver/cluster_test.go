package testserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := StartRedisCluster(t, nil)
	if n := len(c.Addrs()); n != 3 {
		t.Fatalf("%d nodes, want 3", n)
	}
	ctx := context.Background()
	for _, a := range c.Addrs() {
		info, err := redisClient(t, a, "", "").ClusterInfo(ctx).Result()
		must(t, err)
		if !contains(info, "cluster_state:ok") || !contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("%s: cluster info:\n%s", a, info)
		}
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ReadTimeout: time.Second})
	defer cc.Close()
	slots := map[int64]bool{}
	for i := range 30 {
		key := fmt.Sprintf("key-%d", i)
		must(t, cc.Set(ctx, key, i, 0).Err())
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		must(t, err)
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Fatalf("keys landed in %d slot(s)", len(slots))
	}
	// Each master holds some of them.
	for _, a := range c.Addrs() {
		n, err := redisClient(t, a, "", "").DBSize(ctx).Result()
		must(t, err)
		if n == 0 {
			t.Errorf("master %s holds no keys", a)
		}
	}
}

func TestRedisClusterNodeRestart(t *testing.T) {
	t.Parallel()
	c := StartRedisCluster(t, &RedisClusterOptions{NodeTimeout: 500 * time.Millisecond})
	c.RequireFaults(t)
	must(t, c.Node(1).Kill())
	requireRefused(t, c.Node(1).Addr())
	must(t, c.Node(1).Restart())
	must(t, c.WaitOK(10*time.Second))
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	for i := range 10 {
		must(t, cc.Set(context.Background(), fmt.Sprint("k", i), i, 0).Err())
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
