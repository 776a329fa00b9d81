package testserver

import (
	"fmt"
	"os/exec"
)

// localProvider runs the installed server binaries on free loopback ports,
// each in its own directory under $TMPDIR/dlock-testserver-<pid>.
type localProvider struct{}

func (localProvider) Name() string { return "local" }

func (localProvider) Available(kind Kind) error {
	switch kind {
	case KindRedis:
		return need("redis-server", "apt-get install redis-server")
	case KindRedisCluster:
		if err := need("redis-server", "apt-get install redis-server"); err != nil {
			return err
		}
		return need("redis-cli", "apt-get install redis-tools")
	case KindMemcached:
		return need("memcached", "apt-get install memcached")
	case KindZooKeeper, KindZooKeeperEnsemble:
		_, _, err := zkJava()
		return err
	case KindEtcd, KindEtcdCluster:
		return need("etcd", "apt-get install etcd-server")
	case KindPostgres:
		if _, err := postgresBinDir(); err != nil {
			return err
		}
		_, err := pgRunAs()
		return err
	}
	return fmt.Errorf("unknown kind %q", kind)
}

func need(bin, install string) error {
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("%s not found on PATH: %s", bin, install)
	}
	return nil
}

func (localProvider) Redis(lt Lifetime, opts *RedisOptions) (*Redis, error) {
	return localRedis(lt, opts)
}

func (localProvider) RedisCluster(lt Lifetime, opts *RedisClusterOptions) (*RedisCluster, error) {
	return localRedisCluster(lt, opts)
}

func (localProvider) Memcached(lt Lifetime, opts *MemcachedOptions) (*Memcached, error) {
	return localMemcached(lt, opts)
}

func (localProvider) ZooKeeper(lt Lifetime, opts *ZooKeeperOptions) (*ZooKeeper, error) {
	return localZooKeeper(lt, opts, 1)
}

func (localProvider) Postgres(lt Lifetime, opts *PostgresOptions) (*Postgres, error) {
	return localPostgres(lt, opts)
}

func (localProvider) ZooKeeperEnsemble(lt Lifetime, opts *ZooKeeperOptions) (*ZooKeeper, error) {
	return localZooKeeper(lt, opts, 3)
}

func (localProvider) Etcd(lt Lifetime, opts *EtcdOptions) (*Etcd, error) {
	return localEtcd(lt, opts, 1)
}

func (localProvider) EtcdCluster(lt Lifetime, opts *EtcdOptions) (*Etcd, error) {
	return localEtcd(lt, opts, 3)
}
