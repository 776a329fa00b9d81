package testserver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
)

// The other tests run on whichever provider DLOCK_TEST_BACKEND picks (make
// test-docker runs them all on containers). These check what is particular
// to the docker provider, whatever the backend, through the container
// helper's own operations; they skip when no Docker engine answers or the
// image is missing, since containers are optional. What needs the Docker
// API itself (host networking, labels, the sweep of a dead helper's
// containers) is checked in the harness module (harness/containers).

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

func containerState(t *testing.T, e *dockerEngine, id string) containerrpc.State {
	t.Helper()
	var st containerrpc.State
	must(t, e.h.call("State", containerrpc.ID{ID: id}, &st))
	return st
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
		if st := containerState(t, e, id); !st.Found || !st.Running || st.Paused {
			t.Errorf("state after start: %+v", st)
		}
		must(t, redisClient(t, r.Addr(), r.Username, r.Password).Ping(context.Background()).Err())
		if tail := r.LogTail(4096); tail == "" {
			t.Error("empty log tail")
		}
		must(t, r.Stop())
		requireRefused(t, r.Addr())
		if st := containerState(t, e, id); st.Running {
			t.Errorf("state after Stop: %+v", st)
		}
		must(t, r.Restart()) // from stopped
		must(t, redisClient(t, r.Addr(), "", "").Ping(context.Background()).Err())
		must(t, r.Pause()) // removed even when paused
		if st := containerState(t, e, id); !st.Paused {
			t.Errorf("state after Pause: %+v", st)
		}
	})
	if id == "" {
		return
	}
	if st := containerState(t, e, id); st.Found {
		t.Fatalf("container %.12s after its test ended: %+v, want removed", id, st)
	}
}

// A server that exits while it starts fails with its exit code and log.
func TestDockerExitDuringStartup(t *testing.T) {
	t.Parallel()
	e := requireDocker(t, KindRedis)
	port, err := FreePort()
	must(t, err)
	spec := redisSpec(port, redisBaseConf(port, containerDir, false), []string{"--no-such-directive", "1"})
	start := time.Now()
	_, err = e.launch(t, spec)
	if err == nil {
		t.Fatal("started a server with a bad directive")
	}
	if !strings.Contains(err.Error(), "exited during startup (exit code 1)") || !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("error %q: want the exit code and the log naming the directive", err)
	}
	if errors.Is(err, errAddrInUse) {
		t.Errorf("error %v is errAddrInUse", err)
	}
	if d := time.Since(start); d > spec.timeout {
		t.Errorf("failed after %v: the state check should end the wait before the %v timeout", d, spec.timeout)
	}
}

// A server whose port is taken fails with errAddrInUse, so that
// startWithRetry tries other ports.
func TestDockerAddrInUse(t *testing.T) {
	t.Parallel()
	e := requireDocker(t, KindRedis)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = e.launch(t, redisSpec(port, redisBaseConf(port, containerDir, false), nil))
	if !errors.Is(err, errAddrInUse) {
		t.Fatalf("launch on a taken port: %v, want errAddrInUse", err)
	}
}

// A helper whose standard input ends removes its containers and exits, as
// it does when its test binary dies.
func TestDockerHelperRemovesOnEOF(t *testing.T) {
	t.Parallel()
	e := requireDocker(t, KindRedis)
	h, err := startHelper()
	must(t, err)
	defer h.stdin.Close()
	must(t, h.call("Connect", containerrpc.Empty{}, &containerrpc.Engine{}))
	var c containerrpc.ID
	must(t, h.call("Create", containerrpc.CreateArgs{
		Image:       ContainerImage(KindRedis),
		Name:        "dlock-eof-test-" + randomHex(3),
		Entrypoint:  []string{"redis-server"},
		Cmd:         []string{"--port", "0", "--unixsocket", "/tmp/redis.sock"}, // no TCP port needed
		HostNetwork: true,
	}, &c))
	t.Cleanup(func() { e.h.call("Remove", c, &containerrpc.Empty{}) })
	must(t, h.call("Start", c, &containerrpc.Empty{}))
	var out containerrpc.ExecReply
	must(t, h.call("Exec", containerrpc.ExecArgs{ID: c.ID, Cmd: []string{"redis-server", "--version"}}, &out))
	if out.ExitCode != 0 || !strings.Contains(out.Output, "Redis server") {
		t.Errorf("exec redis-server --version: %+v", out)
	}
	if st := containerState(t, e, c.ID); !st.Running {
		t.Fatalf("state after start: %+v", st)
	}

	h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(time.Minute):
		t.Fatal("helper still running a minute after its standard input ended")
	}
	if !h.cmd.ProcessState.Success() {
		t.Errorf("helper exited with %v; stderr:\n%s", h.cmd.ProcessState, h.stderr.String())
	}
	if st := containerState(t, e, c.ID); st.Found {
		t.Errorf("container %.12s of the exited helper: %+v, want removed", c.ID, st)
	}
}

func TestFindRepoRoot(t *testing.T) {
	root, err := findRepoRoot()
	must(t, err)
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "..", "..", ".."); root != want { // internal/testsupport/testserver
		t.Errorf("findRepoRoot() = %q, want %q", root, want)
	}
	if isRepoRoot(filepath.Join(root, "harness")) || isRepoRoot(wd) {
		t.Error("isRepoRoot true for a directory that is not the repository's root")
	}
}

// Without a helper binary or a repository to build one in, the provider
// is unavailable and says how to get a helper.
func TestHelperUnavailable(t *testing.T) {
	t.Setenv(EnvContainersHelper, filepath.Join(t.TempDir(), "no-such-helper"))
	if _, err := startHelper(); err == nil || !strings.Contains(err.Error(), "no-such-helper") {
		t.Errorf("startHelper with %s naming nothing: %v", EnvContainersHelper, err)
	}
	t.Chdir(t.TempDir())
	_, err := buildHelper()
	if err == nil || !strings.Contains(err.Error(), "no dlock repository") || !strings.Contains(err.Error(), EnvContainersHelper) {
		t.Errorf("buildHelper outside the repository: %v", err)
	}
}

func TestContainerImage(t *testing.T) {
	for kind, want := range map[Kind]string{
		KindRedis: "redis:7.0", KindRedisCluster: "redis:7.0", KindMemcached: "memcached:1.6",
		KindZooKeeper: "zookeeper:3.8", KindZooKeeperEnsemble: "zookeeper:3.8",
		KindEtcd: "etcd:3.4", KindEtcdCluster: "etcd:3.4",
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
