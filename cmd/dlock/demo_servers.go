//go:build demoservers

package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
// DLOCK_*_ADDR variables of testserver name external servers instead.
func startServers(kinds []serverKind, logf func(string, ...any)) (addrs map[serverKind][]string, errs map[serverKind]error, stop func()) {
	initTesting()
	scope := &serverScope{logf: logf}
	addrs, errs = map[serverKind][]string{}, map[serverKind]error{}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, k := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			a, err := scope.start(func(tb testing.TB) []string {
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
	return addrs, errs, scope.run
}

// initTesting makes testing.Short usable outside "go test": testserver
// calls it to skip server tests under -short.
var initTesting = sync.OnceFunc(func() {
	testing.Init()
	flag.CommandLine.Parse(nil)
})

// serverScope is the testing.TB that testserver's Start functions get in
// this program: they use it as a Lifetime (Cleanup, Logf) and to report
// failure (Fatal, Skip), which ends the start with an error here. The
// embedded TB is nil; no other method is called (a call would panic, and
// start turns that into an error too).
//
// testserver exports its Start functions for testing.TB only; a start
// function taking its Lifetime would make this adapter unnecessary.
type serverScope struct {
	testing.TB
	logf func(string, ...any)

	mu       sync.Mutex
	cleanups []func()
}

// scopeAbort is the panic value of Fatal and Skip.
type scopeAbort struct{ msg string }

func (s *serverScope) start(f func(testing.TB) []string) (addrs []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			if a, ok := r.(scopeAbort); ok {
				err = fmt.Errorf("%s", a.msg)
			} else {
				err = fmt.Errorf("starting the server: %v", r)
			}
		}
	}()
	return f(s), nil
}

func (s *serverScope) Helper()       {}
func (s *serverScope) Name() string  { return "dlock-demo" }
func (s *serverScope) Failed() bool  { return false }
func (s *serverScope) Skipped() bool { return false }
func (s *serverScope) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}
func (s *serverScope) Log(args ...any)                 { s.logf("%s", fmt.Sprint(args...)) }
func (s *serverScope) Logf(format string, args ...any) { s.logf(format, args...) }
func (s *serverScope) Error(args ...any)               { s.Fatal(args...) }
func (s *serverScope) Errorf(format string, args ...any) {
	s.Fatalf(format, args...)
}
func (s *serverScope) Fatal(args ...any) { panic(scopeAbort{fmt.Sprint(args...)}) }
func (s *serverScope) Fatalf(format string, args ...any) {
	panic(scopeAbort{fmt.Sprintf(format, args...)})
}
func (s *serverScope) FailNow()                         { panic(scopeAbort{"failed"}) }
func (s *serverScope) Skip(args ...any)                 { s.Fatal(args...) }
func (s *serverScope) Skipf(format string, args ...any) { s.Fatalf(format, args...) }
func (s *serverScope) SkipNow()                         { panic(scopeAbort{"skipped"}) }

// run stops the servers, last started first, and removes the directory
// that testserver keeps them in ($TMPDIR/dlock-testserver-<pid>, empty by
// then).
func (s *serverScope) run() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	os.Remove(filepath.Join(os.TempDir(), "dlock-testserver-"+strconv.Itoa(os.Getpid())))
}
