package chaos

import (
	"context"
	"fmt"
	"io"
	"log"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Footprints: how many things a backend keeps that no expiry of its own
// will remove, whatever they are (grants, counters, tombstones, parent
// nodes, rows): keys used once must not make it grow but by a constant.
// Counted before and after a run of keys used once, and compared.
//
//   - Redis: keys without an expiry;
//   - memcached: items without an expiry;
//   - ZooKeeper: every node but /zookeeper's (container and TTL nodes
//     are removed by the server itself once empty or expired, within
//     its check interval);
//   - PostgreSQL: the rows of the driver's tables (keys, entries, voids)
//     in every schema laid out as its;
//   - etcd: keys without a lease.

// RedisFootprint counts the keys without an expiry on Redis servers.
func RedisFootprint(ctx context.Context, addrs []string) (int, error) {
	n := 0
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
		iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			if strings.HasPrefix(iter.Val(), FillerPrefix) {
				continue
			}
			pttl, err := rdb.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				rdb.Close()
				return n, err
			}
			if pttl == -1 {
				n++
			}
		}
		err := iter.Err()
		rdb.Close()
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// MemcachedFootprint counts the items without an expiry on memcached
// servers.
func MemcachedFootprint(ctx context.Context, addrs []string) (int, error) {
	n := 0
	for _, addr := range addrs {
		items, _, err := memcachedDump(ctx, addr)
		if err != nil {
			return n, err
		}
		for _, it := range items {
			if it.exp < 0 && !strings.HasPrefix(it.key, FillerPrefix) {
				n++
			}
		}
	}
	return n, nil
}

// ZooKeeperFootprint counts the nodes of a ZooKeeper service, but
// /zookeeper and what is under it.
func ZooKeeperFootprint(ctx context.Context, addrs []string) (int, error) {
	c, events, err := zk.Connect(addrs, 5*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	n := 0
	var walk func(p string) error
	walk = func(p string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		children, _, err := c.Children(p)
		if err == zk.ErrNoNode {
			return nil
		}
		if err != nil {
			return fmt.Errorf("zookeeper children %s: %w", p, err)
		}
		for _, name := range children {
			if cp := path.Join(p, name); cp != "/zookeeper" {
				n++
				if err := walk(cp); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return n, walk("/")
}

// PostgresFootprint counts the rows of the postgres driver's tables (keys,
// entries, voids), in every schema that has all three.
func PostgresFootprint(ctx context.Context, superuserURL string) (int, error) {
	conn, err := pgx.Connect(ctx, superuserURL)
	if err != nil {
		return 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	rows, err := conn.Query(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'entries'
		AND table_schema IN (SELECT table_schema FROM information_schema.tables WHERE table_name = 'voids')
		AND table_schema IN (SELECT table_schema FROM information_schema.tables WHERE table_name = 'keys')`)
	if err != nil {
		return 0, fmt.Errorf("postgres footprint: schemas: %w", err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("postgres footprint: schemas: %w", err)
	}
	n := 0
	for _, s := range schemas {
		for _, table := range []string{"keys", "entries", "voids"} {
			var c int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s, table}.Sanitize()).Scan(&c); err != nil {
				return n, fmt.Errorf("postgres footprint: %s.%s: %w", s, table, err)
			}
			n += c
		}
	}
	return n, nil
}

// EtcdFootprint counts the keys without a lease in an etcd service.
func EtcdFootprint(ctx context.Context, addrs []string) (int, error) {
	c, err := EtcdClient(addrs, EtcdRoot, EtcdRootPassword)
	if err != nil {
		c, err = EtcdClient(addrs, "", "")
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	resp, err := c.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("etcd get: %w", err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			n++
		}
	}
	return n, nil
}
