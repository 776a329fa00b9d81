//go:build demo

package cli

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// startServers starts local servers of kinds on free loopback ports the
// way the tests do, with internal/testsupport/testserver: the installed redis-server,
// memcached, ZooKeeper (Java) and PostgreSQL (a data directory copied from
// one initdb, run as the postgres user when dlock runs as root), each in a
// fresh directory, killed by stop and, should dlock die first, by the
// kernel (parent-death signal). The DLOCK_*_ADDR variables of testserver
// (DLOCK_POSTGRES_URL for PostgreSQL) name external servers instead. A
// kind that cannot be had here has an error wrapping errNotInstalled; one
// whose server was there and did not start, any other error.
func startServers(kinds []serverKind, logf func(string, ...any)) (started map[serverKind]startedServer, errs map[serverKind]error, stop func()) {
	scope := testserver.NewScope("dlock-demo", logf)
	started, errs = map[serverKind]startedServer{}, map[serverKind]error{}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, k := range kinds {
		if err := testserver.Available(testserver.Kind(k)); err != nil {
			errs[k] = fmt.Errorf("%w: %w", errNotInstalled, err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			var srv startedServer
			a, err := scope.Start(func(tb testing.TB) []string {
				switch k {
				case serverRedis:
					r := testserver.StartRedis(tb, nil)
					srv.pause = pausable(r.Server)
					return r.Addrs()
				case serverMemcached:
					m := testserver.StartMemcached(tb, nil)
					srv.pause = pausable(m.Nodes...)
					return m.Addrs()
				case serverZooKeeper:
					z := testserver.StartZooKeeper(tb, nil)
					srv.pause = pausable(z.Nodes...)
					return z.Addrs()
				case serverPostgres:
					p := testserver.StartPostgres(tb, nil)
					srv.pause = pausable(p.Nodes...)
					srv.url = p.URL()
					return p.Addrs()
				case serverEtcd:
					e := testserver.StartEtcd(tb, nil)
					srv.pause = pausable(e.Nodes...)
					return e.Addrs()
				}
				tb.Fatalf("unknown server kind %q", k)
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[k] = err
				return
			}
			srv.addrs = a
			started[k] = srv
			logf("started %-9s on %s in %v", k, a[0], time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	return started, errs, scope.Stop
}

// pausable returns a pauser of a single server whose fault hooks work
// (not one that DLOCK_REDIS_ADDR or a sibling names), else nil.
func pausable(nodes ...*testserver.Server) pauser {
	if len(nodes) != 1 {
		return nil
	}
	if ok, _ := nodes[0].Faults(); !ok {
		return nil
	}
	return nodes[0]
}
