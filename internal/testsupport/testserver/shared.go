package testserver

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Shared instances are started lazily, once per test binary, on first use by
// a SharedX call, and stopped by Main after all tests ran. Without Main there
// is no point at which a package's last test is known, so SharedX then
// starts a dedicated instance per test instead (correct, just slower) and
// says so in the test log.
//
// A panicking test or os.Exit skips Main's teardown; the servers die with the
// binary anyway (Pdeathsig on Linux) and their directories are removed by the
// next test binary that uses this package (see workDir).

var shared = struct {
	sync.Mutex
	active  bool // Main is running the tests
	entries map[Kind]*sharedEntry
	scope   sharedScope
	warned  bool
}{entries: map[Kind]*sharedEntry{}}

type sharedEntry struct {
	once sync.Once
	v    any
	err  error
}

// Main runs the tests of a package that uses shared servers and tears them
// down afterwards. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testserver.Main(m) }
func Main(m *testing.M) {
	shared.Lock()
	shared.active = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	shared.active = false
	shared.Unlock()
	shared.scope.run()
	closeHelper()
	removeBaseDir()
	os.Exit(code)
}

// sharedScope is the Lifetime of shared instances: cleanups run in Main,
// last registered first, like testing.T's.
type sharedScope struct{ cleanups }

func (s *sharedScope) Logf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "testserver (shared): "+format+"\n", args...)
	}
}

// cleanups keeps functions to run at the end of a lifetime, and runs them
// last registered first, like testing.T's.
type cleanups struct {
	mu sync.Mutex
	fs []func()
}

func (c *cleanups) Cleanup(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fs = append(c.fs, f)
}

func (c *cleanups) run() {
	c.mu.Lock()
	fs := c.fs
	c.fs = nil
	c.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// sharedGet returns the binary-wide instance of kind, starting it with start
// on first use. Without Main it starts a fresh instance tied to tb.
func sharedGet(tb testing.TB, kind Kind, start func(Lifetime) (any, error)) (any, error) {
	shared.Lock()
	if !shared.active {
		if !shared.warned {
			shared.warned = true
			tb.Logf("testserver: Main is not called from TestMain; shared %s servers are started per test", kind)
		}
		shared.Unlock()
		return start(tb)
	}
	e := shared.entries[kind]
	if e == nil {
		e = &sharedEntry{}
		shared.entries[kind] = e
	}
	shared.Unlock()
	e.once.Do(func() { e.v, e.err = start(&shared.scope) })
	return e.v, e.err
}

const sharedReason = "shared instance (use a Start function for fault tests)"

// asShared returns a view of s whose fault hooks refuse to disturb the
// server other tests use.
func (s *Server) asShared() *Server {
	if s.reason != "" {
		return s
	}
	return &Server{addr: s.addr, node: s.node, reason: sharedReason}
}

func (g Group) asShared() Group {
	ns := make([]*Server, len(g.Nodes))
	for i, n := range g.Nodes {
		ns[i] = n.asShared()
	}
	return Group{Nodes: ns}
}
