package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// TB is what testserver's Start functions take.
type TB = testing.TB

// initTesting makes testing.Short usable outside "go test": testserver
// consults it. The test flags keep their defaults.
func initTesting() {
	testing.Init()
	flag.CommandLine.Parse(nil)
}

// scope is the testing.TB that testserver's Start functions get here: they
// use it as their Lifetime (Cleanup, Logf) and to report failure (Fatal,
// Skip), which ends that start with an error. The embedded TB is nil; no
// other method is called (a call would panic, which start also turns into an
// error).
//
// cmd/dlock's demo has the same adapter (cmd/dlock/demo_servers.go). A
// Start function in testserver that takes a Lifetime and returns an error
// would make both unnecessary.
type scope struct {
	testing.TB
	logf func(string, ...any)

	mu       sync.Mutex
	cleanups []func()
}

// abort is the panic value of Fatal and Skip.
type abort struct{ msg string }

func (s *scope) start(f func(testing.TB) []string) (addrs []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			if a, ok := r.(abort); ok {
				err = fmt.Errorf("%s", a.msg)
			} else {
				err = fmt.Errorf("starting the server: %v", r)
			}
		}
	}()
	return f(s), nil
}

// stop stops the servers, last started first, and removes the harness's
// directory for this process ($TMPDIR/dlock-testserver-<pid>, empty then).
func (s *scope) stop() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	os.Remove(filepath.Join(os.TempDir(), "dlock-testserver-"+strconv.Itoa(os.Getpid())))
}

func (s *scope) Helper()       {}
func (s *scope) Name() string  { return "serve" }
func (s *scope) Failed() bool  { return false }
func (s *scope) Skipped() bool { return false }
func (s *scope) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}
func (s *scope) Log(args ...any)                   { s.logf("%s", fmt.Sprint(args...)) }
func (s *scope) Logf(format string, args ...any)   { s.logf(format, args...) }
func (s *scope) Error(args ...any)                 { s.Fatal(args...) }
func (s *scope) Errorf(format string, args ...any) { s.Fatalf(format, args...) }
func (s *scope) Fatal(args ...any)                 { panic(abort{fmt.Sprint(args...)}) }
func (s *scope) Fatalf(format string, args ...any) { panic(abort{fmt.Sprintf(format, args...)}) }
func (s *scope) FailNow()                          { panic(abort{"failed"}) }
func (s *scope) Skip(args ...any)                  { s.Fatal(args...) }
func (s *scope) Skipf(format string, args ...any)  { s.Fatalf(format, args...) }
func (s *scope) SkipNow()                          { panic(abort{"skipped"}) }
