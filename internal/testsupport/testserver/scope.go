package testserver

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// Scope lets a program that is not a test (make demo's dlock, make bench's
// serve) start servers with the Start functions, which take a testing.TB:
// they use it as the servers' lifetime (Cleanup, Logf) and to report
// failure (Fatal, Skip), which Start turns into an error. The embedded TB
// is nil; no other method is called (a call would panic, and Start turns
// that into an error too).
type Scope struct {
	testing.TB
	cleanups
	name string
	logf func(string, ...any)
}

// NewScope returns a Scope named name that logs through logf. It makes
// testing.Short usable outside "go test" (Start consults it), with the
// test flags at their defaults.
func NewScope(name string, logf func(format string, args ...any)) *Scope {
	initTesting()
	return &Scope{name: name, logf: logf}
}

var initTesting = sync.OnceFunc(func() {
	testing.Init()
	flag.CommandLine.Parse(nil)
})

// scopeAbort is the panic value of Fatal and Skip.
type scopeAbort struct{ msg string }

// Start runs f, a call of a Start function such as StartRedis, with the
// Scope as its testing.TB, and returns the addresses f returns, or the
// failure f reported as an error.
func (s *Scope) Start(f func(testing.TB) []string) (addrs []string, err error) {
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

// Stop stops the servers, last started first, and removes the harness's
// directory for this process ($TMPDIR/dlock-testserver-<pid>, empty then,
// once PostgreSQL's template data directory is removed).
func (s *Scope) Stop() {
	s.run()
	removePostgresTemplate()
	os.Remove(filepath.Join(os.TempDir(), "dlock-testserver-"+strconv.Itoa(os.Getpid())))
}

func (s *Scope) Helper()       {}
func (s *Scope) Name() string  { return s.name }
func (s *Scope) Failed() bool  { return false }
func (s *Scope) Skipped() bool { return false }

// Cleanup registers f to run at Stop (the embedded TB has a Cleanup too).
func (s *Scope) Cleanup(f func())                  { s.cleanups.Cleanup(f) }
func (s *Scope) Log(args ...any)                   { s.logf("%s", fmt.Sprint(args...)) }
func (s *Scope) Logf(format string, args ...any)   { s.logf(format, args...) }
func (s *Scope) Error(args ...any)                 { s.Fatal(args...) }
func (s *Scope) Errorf(format string, args ...any) { s.Fatalf(format, args...) }
func (s *Scope) Fatal(args ...any)                 { panic(scopeAbort{fmt.Sprint(args...)}) }
func (s *Scope) Fatalf(format string, args ...any) { panic(scopeAbort{fmt.Sprintf(format, args...)}) }
func (s *Scope) FailNow()                          { panic(scopeAbort{"failed"}) }
func (s *Scope) Skip(args ...any)                  { s.Fatal(args...) }
func (s *Scope) Skipf(format string, args ...any)  { s.Fatalf(format, args...) }
func (s *Scope) SkipNow()                          { panic(scopeAbort{"skipped"}) }
