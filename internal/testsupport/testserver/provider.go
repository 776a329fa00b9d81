package testserver

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
)

// Kind names a backend topology.
type Kind string

// The backends the harness provisions.
const (
	KindRedis             Kind = "redis"
	KindRedisCluster      Kind = "redis-cluster"
	KindMemcached         Kind = "memcached"
	KindZooKeeper         Kind = "zookeeper"
	KindZooKeeperEnsemble Kind = "zookeeper-ensemble"
	KindPostgres          Kind = "postgres"
	KindEtcd              Kind = "etcd"
	KindEtcdCluster       Kind = "etcd-cluster"
)

// Lifetime is where a provider registers the teardown of what it started and
// logs progress. testing.TB satisfies it (dedicated instances end with the
// test); shared instances use a scope that ends in Main.
type Lifetime interface {
	Cleanup(func())
	Logf(format string, args ...any)
}

// Provider starts servers: the built-in "local" provider runs the installed
// binaries, the built-in "docker" provider runs containers (through the
// helper dlock-containers, see the package documentation);
// others can be added with RegisterProvider. A provider returns servers whose hooks work (NewServer);
// everything it starts must be torn down through lt.Cleanup.
type Provider interface {
	// Name is the value of DLOCK_TEST_BACKEND that selects the provider.
	Name() string
	// Available returns nil if the provider can start kind here, else an
	// error saying what is missing and how to install it.
	Available(kind Kind) error

	Redis(lt Lifetime, opts *RedisOptions) (*Redis, error)
	RedisCluster(lt Lifetime, opts *RedisClusterOptions) (*RedisCluster, error)
	Memcached(lt Lifetime, opts *MemcachedOptions) (*Memcached, error)
	ZooKeeper(lt Lifetime, opts *ZooKeeperOptions) (*ZooKeeper, error)
	ZooKeeperEnsemble(lt Lifetime, opts *ZooKeeperOptions) (*ZooKeeper, error)
	Postgres(lt Lifetime, opts *PostgresOptions) (*Postgres, error)
	Etcd(lt Lifetime, opts *EtcdOptions) (*Etcd, error)
	EtcdCluster(lt Lifetime, opts *EtcdOptions) (*Etcd, error)
}

// EnvBackend forces one provider by name ("local", "docker") and makes the
// harness ignore the address variables.
const EnvBackend = "DLOCK_TEST_BACKEND"

var providers = struct {
	sync.Mutex
	byName map[string]Provider
	order  []string // fallback order after local
}{byName: map[string]Provider{}}

// RegisterProvider makes p selectable. Providers registered later are tried
// after "local" when DLOCK_TEST_BACKEND is unset. It panics if the name is
// taken.
func RegisterProvider(p Provider) {
	providers.Lock()
	defer providers.Unlock()
	if _, dup := providers.byName[p.Name()]; dup {
		panic("testserver: provider " + p.Name() + " registered twice")
	}
	providers.byName[p.Name()] = p
	providers.order = append(providers.order, p.Name())
}

// The built-in providers, in the order docs/design.md gives: installed binaries
// first, then containers.
func init() {
	RegisterProvider(localProvider{})
	RegisterProvider(dockerProvider{})
}

// pickProvider chooses the provider for kind: the one DLOCK_TEST_BACKEND
// names, else the first registered one that is available.
func pickProvider(kind Kind) (Provider, error) {
	providers.Lock()
	defer providers.Unlock()
	if name := os.Getenv(EnvBackend); name != "" {
		p, ok := providers.byName[name]
		if !ok {
			names := append([]string(nil), providers.order...)
			sort.Strings(names)
			return nil, fmt.Errorf("testserver: %s=%q: unknown provider (have %s)", EnvBackend, name, strings.Join(names, ", "))
		}
		if err := p.Available(kind); err != nil {
			return nil, fmt.Errorf("testserver: %s=%s: %w", EnvBackend, name, err)
		}
		return p, nil
	}
	var why []string
	for _, name := range providers.order {
		p := providers.byName[name]
		err := p.Available(kind)
		if err == nil {
			return p, nil
		}
		why = append(why, fmt.Sprintf("%s: %v", name, err))
	}
	return nil, fmt.Errorf("testserver: no way to run %s: set %s, or %s",
		kind, envAddrVar[kind], strings.Join(why, "; "))
}

// Available returns nil when servers of kind can be had here (its address
// variable names some, or a provider can start them), else the error
// pickProvider gives, which says what is missing and how to install it.
// It tells a server that is not installed from one that is installed and
// fails to start, which the Start functions report alike.
func Available(kind Kind) error {
	if envAddrs(kind) != nil {
		return nil
	}
	_, err := pickProvider(kind)
	return err
}
