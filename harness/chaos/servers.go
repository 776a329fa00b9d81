package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// Backend is a kind of server that dlock's drivers lock on.
type Backend string

// The backends of dlock's network drivers.
const (
	RedisBackend     Backend = "redis"
	MemcachedBackend Backend = "memcached"
	ZooKeeperBackend Backend = "zookeeper"
	PostgresBackend  Backend = "postgres"
)

// Protocol is the wire protocol a Proxy to the backend speaks.
func (b Backend) Protocol() Protocol {
	switch b {
	case MemcachedBackend:
		return Memcached
	case ZooKeeperBackend:
		return ZooKeeper
	case PostgresBackend:
		return PostgreSQL
	case EtcdBackend:
		return GRPC
	}
	return RESP
}

// ServerOptions configure a server started by StartServer.
type ServerOptions struct {
	Persistence bool // Redis: AOF, fsync always
	MemoryMB    int  // memcached -m
	NoEvict     bool // memcached -M
	Ensemble    bool // ZooKeeper: three servers
	Cluster     bool // Redis: a Redis Cluster of three masters
	// EtcdCluster: etcd, three members.
	EtcdCluster bool
	// PGIsolation, if set, is the PostgreSQL database's default isolation
	// level (ALTER DATABASE ... SET default_transaction_isolation): every
	// session's transactions run under it unless they set their own.
	PGIsolation string
}

// Server is a dedicated backend with its fault hooks: Pause (SIGSTOP),
// Resume, Kill (SIGKILL) and Restart act on every node; Residue lists what
// the backend still holds (see RedisResidue and the others).
type Server struct {
	Addrs                        []string
	Pause, Resume, Kill, Restart func() error
	Residue                      func(ctx context.Context) ([]string, error)
	// Footprint counts what the backend keeps that no expiry will remove
	// (see RedisFootprint and the others).
	Footprint func(ctx context.Context) (int, error)
	// Nodes are the servers of a group (a ZooKeeper ensemble, a Redis
	// Cluster), for per-node hooks; one for a single server.
	Nodes []*testserver.Server
	// ZK is set for ZooKeeper, for its leader.
	ZK *testserver.ZooKeeper
	// PG is set for PostgreSQL: its superuser's URL, Exec, CreateUser.
	PG *testserver.Postgres
	// Etcd is set for etcd, for its leader.
	Etcd *testserver.Etcd
}

// ZKTick is the tick of ZooKeeper servers from StartServer; sessions last
// from 2 to 20 ticks.
const ZKTick = 250 * time.Millisecond

// StartServer starts a dedicated server of backend b for the test, with
// working fault hooks (it skips the test if the harness cannot inject
// faults into the server it got), stopped when the test ends.
func StartServer(t testing.TB, b Backend, o ServerOptions) *Server {
	t.Helper()
	switch b {
	case RedisBackend:
		if o.Cluster {
			c := testserver.StartRedisCluster(t, &testserver.RedisClusterOptions{Persistence: o.Persistence})
			c.RequireFaults(t)
			return &Server{
				Addrs: c.Addrs(), Pause: c.Pause, Resume: c.Resume, Kill: c.Kill, Restart: c.Restart, Nodes: c.Nodes,
				Footprint: func(ctx context.Context) (int, error) { return RedisFootprint(ctx, c.Addrs()) },
				Residue: func(ctx context.Context) ([]string, error) {
					var out []string
					for _, a := range c.Addrs() {
						found, err := RedisResidue(ctx, a)
						out = append(out, found...)
						if err != nil {
							return out, err
						}
					}
					return out, nil
				},
			}
		}
		r := testserver.StartRedis(t, &testserver.RedisOptions{Persistence: o.Persistence})
		r.RequireFaults(t)
		return &Server{
			Addrs: []string{r.Addr()}, Pause: r.Pause, Resume: r.Resume, Kill: r.Kill, Restart: r.Restart,
			Nodes:     []*testserver.Server{r.Server},
			Residue:   func(ctx context.Context) ([]string, error) { return RedisResidue(ctx, r.Addr()) },
			Footprint: func(ctx context.Context) (int, error) { return RedisFootprint(ctx, []string{r.Addr()}) },
		}
	case MemcachedBackend:
		m := testserver.StartMemcached(t, &testserver.MemcachedOptions{MemoryMB: o.MemoryMB, NoEvict: o.NoEvict})
		m.RequireFaults(t)
		return &Server{
			Addrs: m.Addrs(), Pause: m.Pause, Resume: m.Resume, Kill: m.Kill, Restart: m.Restart, Nodes: m.Nodes,
			Residue:   func(ctx context.Context) ([]string, error) { return MemcachedResidue(ctx, m.Addrs()) },
			Footprint: func(ctx context.Context) (int, error) { return MemcachedFootprint(ctx, m.Addrs()) },
		}
	case ZooKeeperBackend:
		zo := &testserver.ZooKeeperOptions{TickTime: ZKTick}
		var z *testserver.ZooKeeper
		if o.Ensemble {
			z = testserver.StartZooKeeperEnsemble(t, zo)
		} else {
			z = testserver.StartZooKeeper(t, zo)
		}
		z.RequireFaults(t)
		return &Server{
			Addrs: z.Addrs(), Pause: z.Pause, Resume: z.Resume, Kill: z.Kill, Restart: z.Restart, ZK: z, Nodes: z.Nodes,
			Residue:   func(ctx context.Context) ([]string, error) { return ZooKeeperResidue(ctx, z.Addrs()) },
			Footprint: func(ctx context.Context) (int, error) { return ZooKeeperFootprint(ctx, z.Addrs()) },
		}
	case PostgresBackend:
		p := testserver.StartPostgres(t, nil)
		p.RequireFaults(t)
		if err := createPostgresUser(p); err != nil {
			t.Fatal(err)
		}
		if o.PGIsolation != "" {
			if _, err := p.Exec("ALTER DATABASE " + testserver.QuoteIdent(p.Database) + " SET default_transaction_isolation = " + testserver.QuoteLiteral(o.PGIsolation) + ";"); err != nil {
				t.Fatal(err)
			}
		}
		return &Server{
			Addrs: p.Addrs(), Pause: p.Pause, Resume: p.Resume, Kill: p.Kill, Restart: p.Restart, Nodes: p.Nodes, PG: p,
			Residue:   func(ctx context.Context) ([]string, error) { return PostgresResidue(ctx, p.URL()) },
			Footprint: func(ctx context.Context) (int, error) { return PostgresFootprint(ctx, p.URL()) },
		}
	case EtcdBackend:
		var e *testserver.Etcd
		if o.EtcdCluster {
			e = testserver.StartEtcdCluster(t, nil)
		} else {
			e = testserver.StartEtcd(t, nil)
		}
		e.RequireFaults(t)
		return &Server{
			Addrs: e.Addrs(), Pause: e.Pause, Resume: e.Resume, Kill: e.Kill, Restart: e.Restart, Nodes: e.Nodes, Etcd: e,
			Residue:   func(ctx context.Context) ([]string, error) { return EtcdResidue(ctx, e.Addrs()) },
			Footprint: func(ctx context.Context) (int, error) { return EtcdFootprint(ctx, e.Addrs()) },
		}
	}
	t.Fatalf("chaos: unknown backend %q", b)
	return nil
}
