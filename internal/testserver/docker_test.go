package testserver

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// The other tests run on whichever provider DLOCK_TEST_BACKEND picks (make
// test-docker runs them all on containers). These check what is particular
// to the docker provider, whatever the backend; they skip when no Docker
// engine answers or the image is missing, since containers are optional.

func requireDocker(t *testing.T, kind Kind) *dockerEngine {
	t.Helper()
	skipShort(t)
	if err := (dockerProvider{}).Available(kind); err != nil {
		t.Skipf("docker provider unavailable: %v", err)
	}
	e, err := getEngine()
	must(t, err)
	return e
}

func inspect(t *testing.T, e *dockerEngine, id string) (container.InspectResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	return r.Container, err
}

func TestDockerContainer(t *testing.T) {
	t.Parallel()
	e := requireDocker(t, KindRedis)
	var id string
	t.Run("inner", func(t *testing.T) {
		r, err := dockerProvider{}.Redis(t, &RedisOptions{User: "u", ACLRules: []string{"-@scripting"}})
		must(t, err)
		n, ok := r.Server.node.(*containerNode)
		if !ok {
			t.Fatalf("node is %T, want *containerNode", r.Server.node)
		}
		id = n.id()
		c, err := inspect(t, e, id)
		must(t, err)
		if c.HostConfig == nil || c.HostConfig.NetworkMode != "host" {
			t.Errorf("network mode %+v, want host", c.HostConfig)
		}
		if c.Config.Image != ContainerImage(KindRedis) {
			t.Errorf("image %q, want %q", c.Config.Image, ContainerImage(KindRedis))
		}
		if c.Config.Labels[labelPID] != strconv.Itoa(os.Getpid()) || c.Config.Labels[labelOwner] != "1" {
			t.Errorf("labels %v", c.Config.Labels)
		}
		must(t, redisClient(t, r.Addr(), r.Username, r.Password).Ping(context.Background()).Err())
		if tail := r.LogTail(4096); tail == "" {
			t.Error("empty log tail")
		}
		must(t, r.Stop())
		requireRefused(t, r.Addr())
		must(t, r.Restart()) // from stopped
		must(t, redisClient(t, r.Addr(), "", "").Ping(context.Background()).Err())
		must(t, r.Pause()) // removed even when paused
	})
	if id == "" {
		return
	}
	if _, err := inspect(t, e, id); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container %.12s after its test ended: inspect error %v, want not found", id, err)
	}
}

// A container whose test binary died is removed by the next binary's sweep.
func TestDockerSweep(t *testing.T) {
	t.Parallel()
	e := requireDocker(t, KindRedis)
	dead := exec.Command("true")
	must(t, dead.Run())
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	labels := map[string]string{labelOwner: "1", labelPID: strconv.Itoa(dead.Process.Pid), labelHost: host}
	created, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: ContainerImage(KindRedis), Labels: labels},
		Name:   "dlock-sweep-test-" + randomHex(3),
	})
	must(t, err)
	t.Cleanup(func() {
		e.cli.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})
	// A live test binary's container (this one's) must survive the sweep.
	live, err := dockerProvider{}.Memcached(t, nil)
	must(t, err)

	e.sweepContainers(ctx, host)
	if _, err := inspect(t, e, created.ID); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container of dead pid %d survived the sweep (inspect: %v)", dead.Process.Pid, err)
	}
	must(t, memcachedVersion(ctx, live.Addr()))
}

func TestContainerImage(t *testing.T) {
	for kind, want := range map[Kind]string{
		KindRedis: "redis:7.0", KindRedisCluster: "redis:7.0", KindMemcached: "memcached:1.6",
		KindZooKeeper: "zookeeper:3.8", KindZooKeeperEnsemble: "zookeeper:3.8",
	} {
		t.Setenv(imageEnv(kind), "")
		if got := ContainerImage(kind); got != want {
			t.Errorf("ContainerImage(%s) = %q, want %q", kind, got, want)
		}
	}
	t.Setenv(EnvZooKeeperImage, "example.org/zk:3.8.4")
	if got := ContainerImage(KindZooKeeperEnsemble); got != "example.org/zk:3.8.4" {
		t.Errorf("with %s set: %q", EnvZooKeeperImage, got)
	}
}
