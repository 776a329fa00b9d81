package testserver

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// ErrNoFaults is returned by the fault hooks of a server the test may not
// disturb: one reached through an address from the environment, or a shared
// instance. Call RequireFaults first to skip such tests instead.
var ErrNoFaults = errors.New("testserver: fault hooks unavailable")

// Node is a provider's handle on one running server: a local process or a
// container. Restart starts the server again on the same address
// with the same data (killing it first if it runs) and returns once it
// answers. Kill must not return before the server is gone.
type Node interface {
	Addr() string
	Pause() error
	Resume() error
	Kill() error
	Restart() error
	Stop() error
}

// Server is one server as tests see it: its address and fault hooks.
type Server struct {
	addr   string
	node   Node   // nil: no fault hooks
	reason string // why node is nil or must not be used
}

// NewServer wraps a provider's Node.
func NewServer(n Node) *Server { return &Server{addr: n.Addr(), node: n} }

// ExternalServer is a server the harness does not control, e.g. one named
// by an environment variable; its fault hooks return ErrNoFaults.
func ExternalServer(addr, why string) *Server {
	return &Server{addr: addr, reason: why}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Addrs returns []string{s.Addr()}.
func (s *Server) Addrs() []string { return []string{s.addr} }

// Faults reports whether the fault hooks work, and if not, why.
func (s *Server) Faults() (ok bool, why string) {
	if s.node == nil || s.reason != "" {
		return false, s.reason
	}
	return true, ""
}

// RequireFaults skips the test unless the fault hooks work.
func (s *Server) RequireFaults(tb testing.TB) {
	tb.Helper()
	if ok, why := s.Faults(); !ok {
		tb.Skipf("testserver: fault injection unavailable for %s: %s", s.addr, why)
	}
}

func (s *Server) hook(name string, f func(Node) error) error {
	if ok, why := s.Faults(); !ok {
		return fmt.Errorf("%w: %s %s: %s", ErrNoFaults, name, s.addr, why)
	}
	return f(s.node)
}

// Pause freezes the server (SIGSTOP; docker pause for a container):
// connections are accepted by the kernel but nothing is answered until
// Resume.
func (s *Server) Pause() error { return s.hook("pause", Node.Pause) }

// Resume continues a paused server (SIGCONT; docker unpause).
func (s *Server) Resume() error { return s.hook("resume", Node.Resume) }

// Kill ends the server at once (SIGKILL; docker kill); connections are
// refused afterwards.
func (s *Server) Kill() error { return s.hook("kill", Node.Kill) }

// Restart starts the server again on the same address with the same data
// directory, killing it first if it runs, and waits until it answers. What
// survives depends on the backend's persistence (Redis: RedisOptions.Persistence;
// memcached: nothing; ZooKeeper: everything committed).
func (s *Server) Restart() error { return s.hook("restart", Node.Restart) }

// Stop ends the server gracefully (SIGTERM, SIGKILL after 5 seconds; docker
// stop likewise).
func (s *Server) Stop() error { return s.hook("stop", Node.Stop) }

// LogTail returns about the last n bytes of the server's log, or "" when
// the provider keeps no log.
func (s *Server) LogTail(n int) string {
	if l, ok := s.node.(interface{ LogTail(int) string }); ok {
		return l.LogTail(n)
	}
	return ""
}

// Group is a set of servers forming one backend: several memcached servers,
// a Redis Cluster, a ZooKeeper ensemble. Its hooks act on every node at once;
// use Node(i) to act on one.
type Group struct {
	Nodes []*Server
}

// Addr returns the first node's address.
func (g *Group) Addr() string { return g.Nodes[0].Addr() }

// Addrs returns every node's address.
func (g *Group) Addrs() []string {
	a := make([]string, len(g.Nodes))
	for i, n := range g.Nodes {
		a[i] = n.Addr()
	}
	return a
}

// Node returns the i-th node.
func (g *Group) Node(i int) *Server { return g.Nodes[i] }

// RequireFaults skips the test unless every node's fault hooks work.
func (g *Group) RequireFaults(tb testing.TB) {
	tb.Helper()
	for _, n := range g.Nodes {
		n.RequireFaults(tb)
	}
}

// all runs f on every node concurrently (a ZooKeeper node cannot become
// ready until a quorum runs, so restarts must overlap) and joins the errors.
func (g *Group) all(f func(*Server) error) error {
	errs := make([]error, len(g.Nodes))
	var wg sync.WaitGroup
	for i, n := range g.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(n) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Pause pauses every node.
func (g *Group) Pause() error { return g.all((*Server).Pause) }

// Resume resumes every node.
func (g *Group) Resume() error { return g.all((*Server).Resume) }

// Kill kills every node.
func (g *Group) Kill() error { return g.all((*Server).Kill) }

// Restart restarts every node concurrently and waits until all answer.
func (g *Group) Restart() error { return g.all((*Server).Restart) }

// Stop stops every node.
func (g *Group) Stop() error { return g.all((*Server).Stop) }
