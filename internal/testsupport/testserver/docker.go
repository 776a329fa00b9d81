package testserver

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
)

// The docker provider runs each server in its own container, from the images
// below, with host networking: a server listens on a free loopback port
// exactly as a local one does, so a Redis Cluster or ZooKeeper ensemble
// announces addresses the tests can reach and a restarted container keeps
// its address. Its fault hooks are docker pause and unpause (the cgroup
// freezer), docker kill, docker start and docker stop.
//
// The engine is reached through the helper dlock-containers (helper.go),
// which uses testcontainers-go; readiness is probed from here, as for local
// servers. Cleanup goes through the Lifetime; the helper removes what is left
// when the test binary ends or dies, and containers left behind by a helper
// that died too are removed by the next helper.

// Environment variables naming the images the docker provider runs. The
// defaults are the official images' tags; `make images` builds images with
// the same tags from Debian packages for machines without a registry.
const (
	EnvRedisImage     = "DLOCK_REDIS_IMAGE"     // default redis:7.0
	EnvMemcachedImage = "DLOCK_MEMCACHED_IMAGE" // default memcached:1.6
	EnvZooKeeperImage = "DLOCK_ZOOKEEPER_IMAGE" // default zookeeper:3.8
	EnvPostgresImage  = "DLOCK_POSTGRES_IMAGE"  // default postgres:15
	EnvEtcdImage      = "DLOCK_ETCD_IMAGE"      // default etcd:3.4 (make images builds it from Debian's etcd-server)
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
	case KindPostgres:
		env, def = EnvPostgresImage, "postgres:15"
	case KindEtcd, KindEtcdCluster:
		env, def = EnvEtcdImage, "etcd:3.4"
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
	case KindPostgres:
		return EnvPostgresImage
	case KindEtcd, KindEtcdCluster:
		return EnvEtcdImage
	}
	return EnvRedisImage
}

// EnvDebug, when set, makes the container helper log its operations and
// testcontainers-go's own lines, which go to the test binary's stderr.
const EnvDebug = "DLOCK_TESTSERVER_DEBUG"

// dockerEngine is the helper's connection to the Docker engine, shared by
// every container of the test binary.
type dockerEngine struct {
	h       *containersHelper
	desktop bool // Docker Desktop: host networking must be enabled by the user
	version string
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

// getEngine starts the helper and connects it to the Docker engine on first
// use (DOCKER_HOST, the Docker context or the default socket, as the docker
// CLI does; the API version is negotiated, or pinned with
// DOCKER_API_VERSION: the helper inherits the environment). The helper
// removes the containers of dead helpers as it connects.
func getEngine() (*dockerEngine, error) {
	engine.once.Do(func() {
		h, err := getHelper()
		if err != nil {
			engine.err = fmt.Errorf("the docker provider's helper is unavailable: %v", err)
			return
		}
		var info containerrpc.Engine
		if err := h.call("Connect", containerrpc.Empty{}, &info); err != nil {
			engine.err = fmt.Errorf("no Docker engine answers (%v): start Docker, or install the servers for the local provider", err)
			return
		}
		engine.e = &dockerEngine{h: h, desktop: info.Desktop, version: info.Version}
	})
	return engine.e, engine.err
}

// ensureImage makes sure image is on the engine, pulling it if it is not;
// the result is remembered for the test binary.
func (e *dockerEngine) ensureImage(kind Kind, image string) error {
	v, _ := e.images.LoadOrStore(image, &imageCheck{})
	c := v.(*imageCheck)
	c.once.Do(func() {
		c.err = e.h.call("Image", containerrpc.ImageArgs{Image: image, EnvVar: imageEnv(kind)}, &containerrpc.Empty{})
	})
	return c.err
}

// dockerProvider is the "docker" Provider, registered after "local" (see
// provider.go) so that installed servers are preferred.
type dockerProvider struct{}

func (dockerProvider) Name() string { return "docker" }

// Available reports whether the helper runs, a Docker engine answers and
// has (or can pull) the image for kind.
func (dockerProvider) Available(kind Kind) error {
	e, err := getEngine()
	if err != nil {
		return err
	}
	return e.ensureImage(kind, ContainerImage(kind))
}
