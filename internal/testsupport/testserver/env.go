package testserver

import (
	"os"
	"strings"
)

// Environment variables naming servers the tests should use instead of
// starting their own. Their fault hooks are unavailable.
const (
	EnvRedisAddr         = "DLOCK_REDIS_ADDR"          // host:port
	EnvRedisClusterAddrs = "DLOCK_REDIS_CLUSTER_ADDRS" // host:port,host:port,...
	EnvMemcachedAddr     = "DLOCK_MEMCACHED_ADDR"      // host:port[,host:port...]
	EnvZooKeeperAddr     = "DLOCK_ZOOKEEPER_ADDR"      // host:port[,host:port...]
	EnvPostgresURL       = "DLOCK_POSTGRES_URL"        // postgres://user:password@host:port/dbname?sslmode=disable
	EnvEtcdAddr          = "DLOCK_ETCD_ADDR"           // host:port[,host:port...] (client URLs' hosts, plain http)
)

var envAddrVar = map[Kind]string{
	KindRedis:             EnvRedisAddr,
	KindRedisCluster:      EnvRedisClusterAddrs,
	KindMemcached:         EnvMemcachedAddr,
	KindZooKeeper:         EnvZooKeeperAddr,
	KindZooKeeperEnsemble: EnvZooKeeperAddr,
	KindPostgres:          EnvPostgresURL,
	KindEtcd:              EnvEtcdAddr,
	KindEtcdCluster:       EnvEtcdAddr,
}

// envAddrs returns the addresses the environment gives for kind, or nil.
// DLOCK_TEST_BACKEND, when set, wins over the address variables.
func envAddrs(kind Kind) []string {
	if os.Getenv(EnvBackend) != "" {
		return nil
	}
	if kind == KindPostgres { // one URL, whose query may hold commas
		if u := strings.TrimSpace(os.Getenv(EnvPostgresURL)); u != "" {
			return []string{u}
		}
		return nil
	}
	var addrs []string
	for _, a := range strings.Split(os.Getenv(envAddrVar[kind]), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

func externalGroup(kind Kind, addrs []string) Group {
	var g Group
	for _, a := range addrs {
		g.Nodes = append(g.Nodes, ExternalServer(a, "address from "+envAddrVar[kind]))
	}
	return g
}
