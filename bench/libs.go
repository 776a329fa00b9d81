package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock/driver/memcached"
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/driver/zookeeper"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis/rueidislock"
)

// A lib is one lock library, in one configuration, on one backend.
type lib struct {
	name    string // as printed: "redisnx", "redsync", "redsync (1ms)"
	backend string // "redis", "memcached", "zookeeper", "postgres", "etcd"
	peer    bool   // a peer library, not dlock
	plain   bool   // a plain lock of the backend's, a baseline of its own (postgres advisory locks)
	note    string // what the configuration is, for the legend
	// missing, when set, says why the library is not measured ("not
	// measured: ..."): its rows say so in every scenario, and open is nil.
	missing string
	// open makes a client of the library, standing for one process: its own
	// connections (and ZooKeeper session). Each Lock call on it may run
	// concurrently with others.
	open func(ctx context.Context, addr string) (client, error)
}

// A client takes locks through one library.
type client interface {
	// Lock blocks until key is granted, the library gives up, or ctx ends.
	Lock(ctx context.Context, key string) (held, error)
	Close() error
}

// held is a granted lock.
type held interface {
	Unlock(ctx context.Context) error
}

// The retry settings the peers are run with. Their documented defaults:
// redsync waits rand[50ms, 250ms) between tries and gives up after 32;
// redislock's default is not to retry at all, so its documented example's
// LinearBackoff(100ms) stands for the default (bounded by the caller's
// context instead of LimitRetry(3), so that a waiter waits as the others
// do). "(1ms)" is the same with the retry delay tuned down to 1 ms.
// go-zookeeper's zk.Lock does not poll: it watches its predecessor.
const (
	redislockDefaultRetry = 100 * time.Millisecond
	tunedRetry            = time.Millisecond
	peerTTL               = 8 * time.Second // redsync's default expiry; redislock's TTL
	zkSessionTimeout      = 10 * time.Second
)

// libraries returns every library to measure, grouped by backend, dlock's
// drivers first.
func libraries() []lib {
	return []lib{
		{name: "redisnx", backend: "redis", note: "dlock defaults (TTL 30s, auto-renew, lock.DefaultRetry 2..250ms + pub/sub)", open: openDlockRedis(redisnxNew)},
		{name: "rediswatch", backend: "redis", note: "dlock defaults", open: openDlockRedis(rediswatchNew)},
		{name: "redsync", backend: "redis", peer: true, note: "redsync v4, one pool (go-redis v9): expiry 8s, 32 tries, delay rand[50,250)ms", open: openRedsync(false)},
		{name: "redsync (1ms)", backend: "redis", peer: true, note: "as redsync, WithRetryDelay(1ms)", open: openRedsync(true)},
		{name: "redislock", backend: "redis", peer: true, note: "bsm/redislock: TTL 8s, LinearBackoff(100ms) (its documented example; its default is no retry)", open: openRedislock(redislockDefaultRetry)},
		{name: "redislock (1ms)", backend: "redis", peer: true, note: "as redislock, LinearBackoff(1ms)", open: openRedislock(tunedRetry)},
		{name: "rueidislock", backend: "redis", peer: true, note: "rueidis v1.0.80 rueidislock defaults: KeyMajority 2 (3 keys), KeyValidity 5s, extended every 2.5s, TryNextAfter 20ms, waiters woken by client-side caching (tracking OPTOUT)", open: openRueidislock("rueidislock", rueidislock.LockerOption{})},
		{name: "rueidislock (1 key)", backend: "redis", peer: true, note: "as rueidislock, its README's setting for one server: KeyMajority 1, NoLoopTracking", open: openRueidislock("rueidislock (1 key)", rueidislockReadme)},
		{name: "memcached", backend: "memcached", note: "dlock defaults (memcached.DefaultRetry 1..2ms polling)", open: openDlockMemcached},
		{name: "zookeeper", backend: "zookeeper", note: "dlock defaults, session 10s", open: openDlockZK},
		{name: "zk.Lock", backend: "zookeeper", peer: true, note: "go-zookeeper v1.0.4 zk.Lock (watches its predecessor; no retry delay to tune)", open: openZkLock},
		{name: "postgres", backend: "postgres", note: "dlock defaults (pgxpool defaults; waiters woken by LISTEN/NOTIFY)", open: openDlockPostgres},
		{name: "advisory (1ms)", backend: "postgres", plain: true, note: "plain pg_try_advisory_lock every 1ms, pg_advisory_unlock, one connection per worker (no TTL, no fencing, no queue)", open: openAdvisory},
		{name: "etcd", backend: "etcd", note: "dlock defaults (TTL 30s, auto-renew; waiters watch the entry ahead)", open: openDlockEtcd},
		{name: "concurrency.Mutex", backend: "etcd", peer: true, note: "etcd client v3 concurrency.Mutex: a Session (TTL 60s) per client, NewMutex per Lock (waits on its predecessor's delete)", open: openEtcdMutex},
		{name: "pglock", backend: "postgres", peer: true, note: "cirello.io/pglock", missing: pglockMissing},
	}
}

// pglockMissing is why cirello.io/pglock has no figures.
const pglockMissing = "not measured: cirello.io/pglock is not served by the Go module proxy here (403 Forbidden), so it cannot be built"

// kind is the kind of l's rows.
func (l lib) kind() rowKind {
	switch {
	case l.peer:
		return peerRow
	case l.plain:
		return plainRow
	}
	return dlockRow
}

// --- dlock ---

type dlockClient struct {
	l     *lock.Locker
	close func() error // the backend client's Close
}

func (c *dlockClient) Lock(ctx context.Context, key string) (held, error) {
	lease, err := c.l.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

func (c *dlockClient) Close() error {
	err := c.l.Close()
	return errors.Join(err, c.close())
}

func redisnxNew(rdb *redis.Client) *lock.Locker    { return redisnx.New(rdb, nil) }
func rediswatchNew(rdb *redis.Client) *lock.Locker { return rediswatch.New(rdb, nil) }

func openDlockRedis(newLocker func(*redis.Client) *lock.Locker) func(context.Context, string) (client, error) {
	return func(ctx context.Context, addr string) (client, error) {
		rdb, err := dialRedis(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &dlockClient{l: newLocker(rdb), close: rdb.Close}, nil
	}
}

func dialRedis(ctx context.Context, addr string) (*redis.Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	return rdb, nil
}

func openDlockMemcached(ctx context.Context, addr string) (client, error) {
	mc, err := dialMemcached(addr)
	if err != nil {
		return nil, err
	}
	return &dlockClient{l: memcached.New(mc, nil), close: mc.Close}, nil
}

func dialMemcached(addr string) (*memcache.Client, error) {
	mc := memcache.New(addr)
	mc.MaxIdleConns = 8
	if err := mc.Ping(); err != nil {
		mc.Close()
		return nil, fmt.Errorf("memcached %s: %w", addr, err)
	}
	return mc, nil
}

// openDlockZK dials as lock.Open does: the Locker makes the connection, so
// it knows when the session began (a Locker over a connection made by its
// user has no proof of the session until a request of its own is 0.3 of
// the timeout old, and its first grant waits for that: see
// zookeeper.New).
func openDlockZK(ctx context.Context, addr string) (client, error) {
	l, err := zookeeper.Dial(ctx, []string{addr}, &zookeeper.Options{SessionTimeout: zkSessionTimeout})
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", addr, err)
	}
	return &dlockClient{l: l, close: func() error { return nil }}, nil
}

// dialZK connects and waits for the session: zk.Connect returns before it.
func dialZK(addr string) (*zk.Conn, error) {
	conn, _, err := zk.Connect([]string{addr}, zkSessionTimeout, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", addr, err)
	}
	if _, _, err := conn.Exists("/"); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zookeeper %s: %w", addr, err)
	}
	return conn, nil
}

// --- redsync ---

type redsyncClient struct {
	rdb   *redis.Client
	rs    *redsync.Redsync
	tuned bool
}

// rsHeld is a locked *redsync.Mutex; the conversion does not allocate.
type rsHeld redsync.Mutex

func (h *rsHeld) Unlock(ctx context.Context) error {
	ok, err := (*redsync.Mutex)(h).UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

func openRedsync(tuned bool) func(context.Context, string) (client, error) {
	return func(ctx context.Context, addr string) (client, error) {
		rdb, err := dialRedis(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &redsyncClient{rdb: rdb, rs: redsync.New(redsyncredis.NewPool(rdb)), tuned: tuned}, nil
	}
}

// Lock makes a Mutex per call, as a user locking a key does.
func (c *redsyncClient) Lock(ctx context.Context, key string) (held, error) {
	var m *redsync.Mutex
	if c.tuned {
		m = c.rs.NewMutex(key, redsync.WithRetryDelay(tunedRetry))
	} else {
		m = c.rs.NewMutex(key)
	}
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return (*rsHeld)(m), nil
}

func (c *redsyncClient) Close() error { return c.rdb.Close() }

// --- redislock ---

type redislockClient struct {
	rdb   *redis.Client
	rl    *redislock.Client
	retry time.Duration
}

type rlHeld redislock.Lock

func (h *rlHeld) Unlock(ctx context.Context) error { return (*redislock.Lock)(h).Release(ctx) }

func openRedislock(retry time.Duration) func(context.Context, string) (client, error) {
	return func(ctx context.Context, addr string) (client, error) {
		rdb, err := dialRedis(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &redislockClient{rdb: rdb, rl: redislock.New(rdb), retry: retry}, nil
	}
}

func (c *redislockClient) Lock(ctx context.Context, key string) (held, error) {
	l, err := c.rl.Obtain(ctx, key, peerTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(c.retry)})
	if err != nil {
		return nil, err
	}
	return (*rlHeld)(l), nil
}

func (c *redislockClient) Close() error { return c.rdb.Close() }

// --- zk.Lock ---

type zkLockClient struct{ conn *zk.Conn }

type zkHeld zk.Lock

func (h *zkHeld) Unlock(context.Context) error { return (*zk.Lock)(h).Unlock() }

func openZkLock(ctx context.Context, addr string) (client, error) {
	conn, err := dialZK(addr)
	if err != nil {
		return nil, err
	}
	return &zkLockClient{conn: conn}, nil
}

// zkLockRoot is the parent of zk.Lock's key nodes; zk.Lock creates it.
const zkLockRoot = "/bench-zklock/"

// Lock makes a zk.Lock per call, as a user locking a key does. zk.Lock
// takes no context: a Lock whose ctx ends keeps waiting in the queue until
// its turn; the bench's contexts end only at the end of a run, when the
// connection is closed.
func (c *zkLockClient) Lock(ctx context.Context, key string) (held, error) {
	l := zk.NewLock(c.conn, zkLockRoot+zkNodeName(key), zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return (*zkHeld)(l), nil
}

func (c *zkLockClient) Close() error { c.conn.Close(); return nil }

// zkNodeName turns a bench key (letters, digits, '-', '/', '.') into one
// node name.
func zkNodeName(key string) string {
	b := []byte(key)
	for i, c := range b {
		if c == '/' {
			b[i] = '.'
		}
	}
	return string(b)
}
