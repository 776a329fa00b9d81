package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
)

// A probe makes the backend's cheapest round trip, the unit the lock
// figures are compared with: Redis PING, Memcached version, ZooKeeper
// exists, PostgreSQL SELECT 1, etcd Get (a linearizable read). It uses its own connection, through the same client library as
// the drivers.
type probe interface {
	roundTrip(ctx context.Context) error
	Close() error
}

// probeName is what the baselines are called.
var probeName = map[string]string{"redis": "PING", "memcached": "version", "zookeeper": "exists", "postgres": "SELECT 1", "etcd": "Get"}

func openProbe(ctx context.Context, backend, addr string) (probe, error) {
	switch backend {
	case "redis":
		rdb, err := dialRedis(ctx, addr)
		if err != nil {
			return nil, err
		}
		return redisProbe{rdb}, nil
	case "memcached":
		mc, err := dialMemcached(addr)
		if err != nil {
			return nil, err
		}
		return memcachedProbe{mc}, nil
	case "zookeeper":
		conn, err := dialZK(addr)
		if err != nil {
			return nil, err
		}
		return zkProbe{conn}, nil
	case "postgres":
		conn, err := dialPostgres(ctx, addr)
		if err != nil {
			return nil, err
		}
		return postgresProbe{conn}, nil
	case "etcd":
		c, err := dialEtcd(ctx, addr)
		if err != nil {
			return nil, err
		}
		return etcdProbe{c}, nil
	}
	return nil, fmt.Errorf("unknown backend %q", backend)
}

type redisProbe struct{ rdb *redis.Client }

func (p redisProbe) roundTrip(ctx context.Context) error { return p.rdb.Ping(ctx).Err() }
func (p redisProbe) Close() error                        { return p.rdb.Close() }

type memcachedProbe struct{ mc *memcache.Client }

// roundTrip sends "version" (gomemcache's Ping, to the one server).
func (p memcachedProbe) roundTrip(context.Context) error { return p.mc.Ping() }
func (p memcachedProbe) Close() error                    { return p.mc.Close() }

type zkProbe struct{ conn *zk.Conn }

func (p zkProbe) roundTrip(context.Context) error { _, _, err := p.conn.Exists("/"); return err }
func (p zkProbe) Close() error                    { p.conn.Close(); return nil }

// serverVersion asks the backend for its version, for the header.
func serverVersion(ctx context.Context, backend, addr string) string {
	switch backend {
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		info, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			return "?"
		}
		return "redis " + infoField(info, "redis_version")
	case "memcached":
		return "memcached " + memcachedVersion(addr)
	case "zookeeper":
		return "zookeeper " + zkVersion(addr)
	case "postgres":
		return "postgresql " + postgresVersion(ctx, addr)
	case "etcd":
		return "etcd " + etcdVersion(ctx, addr)
	}
	return "?"
}

// serverAddr is where the server of backend is, for the header: for
// PostgreSQL, whose variable is a URL with a password, its host and port.
func serverAddr(backend, addr string) string {
	if backend == "postgres" {
		return redactPostgres(addr)
	}
	return addr
}

// infoField returns the value of name in an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}
