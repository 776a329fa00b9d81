// Command serve starts dlock's test servers through internal/testsupport/testserver, the
// harness the tests use, for programs outside the main module that cannot
// import it (the bench module, make bench):
//
//	serve [-kinds redis,memcached,zookeeper] [-- command [args...]]
//
// It provisions each kind as the tests do (an address from DLOCK_REDIS_ADDR,
// DLOCK_MEMCACHED_ADDR or DLOCK_ZOOKEEPER_ADDR, a URL from DLOCK_POSTGRES_URL
// (-kinds postgres); else the installed binaries on
// free loopback ports; else containers; DLOCK_TEST_BACKEND forces a provider),
// and then:
//
//   - with a command: runs it with DLOCK_REDIS_ADDR, DLOCK_MEMCACHED_ADDR and
//     DLOCK_ZOOKEEPER_ADDR (and DLOCK_POSTGRES_URL) set to the servers, stops the servers when it exits,
//     and exits with its status. SIGINT and SIGTERM are passed on to it.
//   - without: prints one NAME=ADDR line per server on standard output and
//     keeps the servers until standard input is closed or a SIGINT or SIGTERM
//     arrives.
//
// Local servers also die with serve (the harness's parent-death signal), so
// none outlives it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// kinds maps a -kinds name to its address variable and its start function.
var kinds = map[string]struct {
	env   string
	start func(testing.TB) []string
}{
	"redis":     {testserver.EnvRedisAddr, func(tb testing.TB) []string { return testserver.StartRedis(tb, nil).Addrs() }},
	"memcached": {testserver.EnvMemcachedAddr, func(tb testing.TB) []string { return testserver.StartMemcached(tb, nil).Addrs() }},
	"zookeeper": {testserver.EnvZooKeeperAddr, func(tb testing.TB) []string { return testserver.StartZooKeeper(tb, nil).Addrs() }},
	// postgres: its variable holds a URL with the superuser's password.
	"postgres": {testserver.EnvPostgresURL, func(tb testing.TB) []string { return []string{testserver.StartPostgres(tb, nil).URL()} }},
	"etcd":     {testserver.EnvEtcdAddr, func(tb testing.TB) []string { return testserver.StartEtcd(tb, nil).Addrs() }},
}

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	list := fs.String("kinds", "redis,memcached,zookeeper", "comma-separated servers to start: redis, memcached, zookeeper, postgres, etcd")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: serve [-kinds redis,memcached,zookeeper] [-- command [args...]]\n")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "serve: "+format+"\n", args...) }

	var names []string
	for _, k := range strings.Split(*list, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if _, ok := kinds[k]; !ok {
			logf("unknown kind %q (want redis, memcached, zookeeper or postgres)", k)
			return 2
		}
		names = append(names, k)
	}

	sc := testserver.NewScope("serve", logf)
	defer sc.Stop()
	env, err := startAll(sc, names)
	if err != nil {
		logf("%v", err)
		return 1
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if fs.NArg() == 0 {
		for _, kv := range env {
			fmt.Println(kv)
		}
		closed := make(chan struct{})
		go func() { io.Copy(io.Discard, os.Stdin); close(closed) }()
		select {
		case <-closed:
		case s := <-sigs:
			logf("%v: stopping the servers", s)
		}
		return 0
	}

	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		logf("%v", err)
		return 1
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode()
	default:
		logf("%s: %v", fs.Arg(0), err)
		return 1
	}
}

// startAll starts the servers of names concurrently (ZooKeeper takes
// seconds) and returns their NAME=ADDR assignments, in the order of names.
func startAll(sc *testserver.Scope, names []string) ([]string, error) {
	env := make([]string, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := kinds[name]
			t0 := time.Now()
			addrs, err := sc.Start(k.start)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %v", name, err)
				return
			}
			env[i] = k.env + "=" + strings.Join(addrs, ",")
			sc.Logf("%-9s on %s (%v)", name, strings.Join(addrs, ","), time.Since(t0).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	return env, errors.Join(errs...)
}
