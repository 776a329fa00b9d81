package testserver

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisClusterOptions configures a Redis Cluster. nil means the zero value.
type RedisClusterOptions struct {
	// Persistence as in RedisOptions, for every node.
	Persistence bool
	// NodeTimeout is cluster-node-timeout: how long a node may be unreachable
	// (e.g. paused) before the others mark it failed. Default 2s.
	NodeTimeout time.Duration
}

// RedisCluster is a Redis Cluster of three masters without replicas, all
// 16384 slots assigned. Killing a node leaves its slots unserved until
// Restart (which keeps the node's identity and slots via nodes.conf).
type RedisCluster struct {
	Group
}

// StartRedisCluster returns a Redis Cluster for this test alone: the nodes
// named by DLOCK_REDIS_CLUSTER_ADDRS (fault hooks unavailable), else one
// started by a provider. It fails the test if none can be had, and skips it
// with -short.
func StartRedisCluster(tb testing.TB, opts *RedisClusterOptions) *RedisCluster {
	tb.Helper()
	skipShort(tb)
	c, err := startRedisCluster(tb, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// SharedRedisCluster returns the test binary's shared Redis Cluster (see
// SharedRedis for the rules).
func SharedRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	skipShort(tb)
	v, err := sharedGet(tb, KindRedisCluster, func(lt Lifetime) (any, error) { return startRedisCluster(lt, nil) })
	if err != nil {
		tb.Fatal(err)
	}
	return &RedisCluster{Group: v.(*RedisCluster).Group.asShared()}
}

func startRedisCluster(lt Lifetime, opts *RedisClusterOptions) (*RedisCluster, error) {
	if opts == nil {
		opts = &RedisClusterOptions{}
	}
	if addrs := envAddrs(KindRedisCluster); addrs != nil {
		return &RedisCluster{Group: externalGroup(KindRedisCluster, addrs)}, nil
	}
	p, err := pickProvider(KindRedisCluster)
	if err != nil {
		return nil, err
	}
	return p.RedisCluster(lt, opts)
}

// WaitOK waits until every node reports cluster_state:ok, e.g. after a
// node's Restart (the others take up to twice the node timeout to clear
// their failure flag).
func (c *RedisCluster) WaitOK(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return waitClusterOK(ctx, c.Addrs())
}

const clusterMasters = 3

func localRedisCluster(lt Lifetime, opts *RedisClusterOptions) (*RedisCluster, error) {
	nodeTimeout := opts.NodeTimeout
	if nodeTimeout <= 0 {
		nodeTimeout = 2 * time.Second
	}
	root, err := newWorkDir(lt, "redis-cluster")
	if err != nil {
		return nil, err
	}
	c := &RedisCluster{}
	err = startWithRetry(func() error {
		ports, err := freeBusPorts(clusterMasters)
		if err != nil {
			return err
		}
		c.Nodes = nil
		var procs []*process
		ok := false
		defer func() { // a failed attempt leaves no node running
			for _, p := range procs {
				if !ok {
					p.Kill()
				}
			}
		}()
		for i, port := range ports {
			dir, err := mkdirAll(filepath.Join(root, "node"+strconv.Itoa(i)+"-"+strconv.Itoa(port)))
			if err != nil {
				return err
			}
			conf := redisBaseConf(port, dir, opts.Persistence) + fmt.Sprintf(
				"cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout %d\n",
				nodeTimeout.Milliseconds())
			p, err := newRedisProcess(dir, port, conf, nil, redisPing)
			if err != nil {
				return err
			}
			if err := launch(lt, p); err != nil {
				return err
			}
			procs = append(procs, p)
			c.Nodes = append(c.Nodes, NewServer(p))
		}
		if err := clusterCreate(c.Addrs()); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := waitClusterOK(ctx, c.Addrs()); err != nil {
			return err
		}
		// From now on a node is ready only once it serves the cluster again.
		for _, p := range procs {
			addr := p.addr
			p.ready = func(ctx context.Context) error { return clusterNodeOK(ctx, addr) }
		}
		ok = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// clusterCreate joins the nodes with redis-cli --cluster create.
func clusterCreate(addrs []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testserver: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func clusterNodeOK(ctx context.Context, addr string) error {
	info, err := respDo(ctx, addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("%s: cluster not ok:\n%s", addr, strings.TrimSpace(info))
	}
	return nil
}

func waitClusterOK(ctx context.Context, addrs []string) error {
	for {
		var err error
		for _, a := range addrs {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err = clusterNodeOK(pctx, a)
			cancel()
			if err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: redis cluster not ok: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
