package testserver

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// The docker provider runs each server in its own container started with
// testcontainers-go, from the images below, with host networking: a server
// listens on a free loopback port exactly as a local one does, so a Redis
// Cluster or ZooKeeper ensemble announces addresses the tests can reach and
// a restarted container keeps its address. Its fault hooks are docker pause
// and unpause (the cgroup freezer), docker kill, docker start and docker stop.
//
// testcontainers-go's reaper (Ryuk) is switched off unless
// TESTCONTAINERS_RYUK_DISABLED is set: it needs an image from a registry.
// Cleanup goes through the Lifetime instead, and containers left behind by a
// test binary that died are removed by the next one (see sweepContainers).

// Environment variables naming the images the docker provider runs. The
// defaults are the official images' tags; `make images` builds images with
// the same tags from Debian packages for machines without a registry.
const (
	EnvRedisImage     = "DLOCK_REDIS_IMAGE"     // default redis:7.0
	EnvMemcachedImage = "DLOCK_MEMCACHED_IMAGE" // default memcached:1.6
	EnvZooKeeperImage = "DLOCK_ZOOKEEPER_IMAGE" // default zookeeper:3.8
)

// ContainerImage returns the image the docker provider runs for kind: the
// one its environment variable names, else the default.
func ContainerImage(kind Kind) string {
	env, def := EnvRedisImage, "redis:7.0"
	switch kind {
	case KindMemcached:
		env, def = EnvMemcachedImage, "memcached:1.6"
	case KindZooKeeper, KindZooKeeperEnsemble:
		env, def = EnvZooKeeperImage, "zookeeper:3.8"
	}
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v
	}
	return def
}

func imageEnv(kind Kind) string {
	switch kind {
	case KindMemcached:
		return EnvMemcachedImage
	case KindZooKeeper, KindZooKeeperEnsemble:
		return EnvZooKeeperImage
	}
	return EnvRedisImage
}

// EnvDebug, when set, sends testcontainers-go's own log lines to the test log.
const EnvDebug = "DLOCK_TESTSERVER_DEBUG"

// Labels on every container the docker provider starts.
const (
	labelOwner = "org.dlock.testserver"      // "1"
	labelPID   = "org.dlock.testserver.pid"  // the test binary's pid
	labelHost  = "org.dlock.testserver.host" // the test binary's host name
)

// dockerEngine is the connection to the Docker engine, shared by every
// container of the test binary.
type dockerEngine struct {
	cli     *testcontainers.DockerClient
	desktop bool // Docker Desktop: host networking must be enabled by the user
	version string
	labels  map[string]string
	images  sync.Map // image name -> *imageCheck
}

type imageCheck struct {
	once sync.Once
	err  error
}

var engine struct {
	once sync.Once
	e    *dockerEngine
	err  error
}

// getEngine connects to the Docker engine on first use (DOCKER_HOST, the
// Docker context or the default socket, as the docker CLI does; the API
// version is negotiated, or pinned with DOCKER_API_VERSION) and removes the
// containers of dead test binaries.
func getEngine() (*dockerEngine, error) {
	engine.once.Do(func() {
		if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
			os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
		if os.Getenv(EnvDebug) == "" {
			tclog.SetDefault(tclog.NewNoopLogger())
		}
		engine.e, engine.err = connectEngine()
	})
	return engine.e, engine.err
}

func connectEngine() (e *dockerEngine, err error) {
	defer func() {
		// testcontainers-go panics when it finds no Docker host at all.
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("%v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, err
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		cli.Close()
		return nil, err
	}
	host, _ := os.Hostname()
	e = &dockerEngine{
		cli:     cli,
		desktop: strings.Contains(info.Info.OperatingSystem, "Docker Desktop"),
		version: info.Info.ServerVersion,
		labels: map[string]string{
			labelOwner: "1",
			labelPID:   strconv.Itoa(os.Getpid()),
			labelHost:  host,
		},
	}
	e.sweepContainers(ctx, host)
	cli.Close() // idle connections only; the client stays usable
	return e, nil
}

// sweepContainers removes the containers that test binaries on this host
// started and could not remove because they died (killed, timed out).
func (e *dockerEngine) sweepContainers(ctx context.Context, host string) {
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelHost+"="+host),
	})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[labelPID])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		e.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
}

// ensureImage makes sure image is on the engine, pulling it if it is not;
// the result is remembered for the test binary.
func (e *dockerEngine) ensureImage(kind Kind, image string) error {
	v, _ := e.images.LoadOrStore(image, &imageCheck{})
	c := v.(*imageCheck)
	c.once.Do(func() { c.err = e.pullIfMissing(kind, image) })
	return c.err
}

func (e *dockerEngine) pullIfMissing(kind Kind, image string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer e.cli.Close()
	_, err := e.cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", image, err)
	}
	resp, err := e.cli.ImagePull(ctx, image, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(ctx)
	}
	if err == nil {
		_, err = e.cli.ImageInspect(ctx, image)
	}
	if err != nil {
		return fmt.Errorf("image %s is not on this machine and pulling it failed (%v): "+
			"build it offline from Debian packages with `make images` (docker/README-containers.md), "+
			"pull it, or name another image with %s", image, err, imageEnv(kind))
	}
	return nil
}

// dockerProvider is the "docker" Provider, registered after "local" (see
// provider.go) so that installed servers are preferred.
type dockerProvider struct{}

func (dockerProvider) Name() string { return "docker" }

// Available reports whether a Docker engine answers and has (or can pull)
// the image for kind.
func (dockerProvider) Available(kind Kind) error {
	e, err := getEngine()
	if err != nil {
		return fmt.Errorf("no Docker engine answers (%v): start Docker, or install the servers for the local provider", err)
	}
	return e.ensureImage(kind, ContainerImage(kind))
}

// tcQuietLogger drops testcontainers-go's log lines; tcDebugLogger passes them
// to the Lifetime's log.
type tcQuietLogger struct{}

func (tcQuietLogger) Printf(string, ...any) {}

type tcDebugLogger struct{ lt Lifetime }

func (l tcDebugLogger) Printf(format string, args ...any) {
	l.lt.Logf("testcontainers: "+format, args...)
}

func tcLogger(lt Lifetime) tclog.Logger {
	if os.Getenv(EnvDebug) != "" {
		return tcDebugLogger{lt}
	}
	return tcQuietLogger{}
}
