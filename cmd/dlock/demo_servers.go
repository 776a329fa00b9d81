//go:build demoservers

package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

// canStartServers: this binary can start servers (built with -tags
// demoservers, as make demo does).
const canStartServers = true

// startServers starts local servers of kinds on free loopback ports the
// way the tests do, with internal/testserver: the installed redis-server,
// memcached and ZooKeeper (Java), each in a fresh directory, killed by stop
// and, should dlock die first, by the kernel (parent-death signal). The
// DLOCK_*_ADDR variables of testserver name external servers instead. A
// kind that cannot be had here has an error wrapping errNotInstalled; one
// whose server was there and did not start, any other error.
func startServers(kinds []serverKind, logf func(string, ...any)) (addrs map[serverKind][]string, errs map[serverKind]error, stop func()) {
	scope := testserver.NewScope("dlock-demo", logf)
	addrs, errs = map[serverKind][]string{}, map[serverKind]error{}
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
			a, err := scope.Start(func(tb testing.TB) []string {
				switch k {
				case serverRedis:
					return testserver.StartRedis(tb, nil).Addrs()
				case serverMemcached:
					return testserver.StartMemcached(tb, nil).Addrs()
				case serverZooKeeper:
					return testserver.StartZooKeeper(tb, nil).Addrs()
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
			addrs[k] = a
			logf("started %-9s on %s in %v", k, a[0], time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	return addrs, errs, scope.Stop
}
