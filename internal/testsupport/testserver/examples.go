package testserver

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// MainExamples is Main for a package whose runnable examples (those with
// an Output comment) use a shared server of kind: before the tests it
// starts that server and sets the environment variable name to
// url(address), the address being a URL for KindPostgres and host:port
// otherwise. The examples read it.
//
// The server starts only when the examples will run: -run unset or
// naming Example. Otherwise, and under -short (which skips the tests that
// need a server), the examples are skipped (-skip). A server that fails to
// start fails the run.
func MainExamples(m *testing.M, kind Kind, name string, url func(addr string) string) {
	flag.Parse()
	run := flag.Lookup("test.run").Value.String()
	if testing.Short() || (run != "" && !strings.Contains(run, "Example")) {
		skip := flag.Lookup("test.skip").Value.String()
		if skip != "" {
			skip += "|"
		}
		if err := flag.Set("test.skip", skip+"^Example"); err != nil {
			fmt.Fprintln(os.Stderr, "testserver:", err)
			os.Exit(2)
		}
		Main(m)
		return
	}
	shared.Lock()
	shared.active = true
	shared.Unlock()
	addr, err := sharedAddr(kind)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testserver: the examples' %s server: %v\n", kind, err)
		os.Exit(1)
	}
	os.Setenv(name, url(addr))
	Main(m)
}

// sharedAddr starts the shared server of kind, as its SharedX function
// does, and returns its address (Postgres: its URL).
func sharedAddr(kind Kind) (string, error) {
	var start func(Lifetime) (any, error)
	switch kind {
	case KindRedis:
		start = func(lt Lifetime) (any, error) { return startRedis(lt, nil) }
	case KindMemcached:
		start = func(lt Lifetime) (any, error) { return startMemcached(lt, memcachedDefaults(nil)) }
	case KindZooKeeper:
		start = func(lt Lifetime) (any, error) { return startZooKeeper(lt, KindZooKeeper, nil) }
	case KindPostgres:
		start = func(lt Lifetime) (any, error) { return startPostgres(lt, nil) }
	case KindEtcd:
		start = func(lt Lifetime) (any, error) { return startEtcd(lt, KindEtcd, nil) }
	default:
		return "", fmt.Errorf("no shared server of kind %s for examples", kind)
	}
	v, err := sharedGet(nil, kind, start)
	if err != nil {
		return "", err
	}
	switch s := v.(type) {
	case *Redis:
		return s.Addr(), nil
	case *Postgres:
		return s.URL(), nil
	case interface{ Addr() string }:
		return s.Addr(), nil
	}
	return "", fmt.Errorf("%s: unexpected server %T", kind, v)
}
