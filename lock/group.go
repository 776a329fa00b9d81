package lock

import "sync"

// group counts goroutines or calls under way, like a sync.WaitGroup that
// can be waited for with a timeout and that refuses new members once
// stopped (so that a member never joins while Close waits).
type group struct {
	mu      sync.Mutex
	n       int
	idle    chan struct{} // closed when n drops to zero; nil until idleChan asks
	stopped bool
}

// add joins a member, or reports false when the group is stopped.
func (g *group) add() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.n++
	return true
}

// done leaves; every add that returned true is matched by one done.
func (g *group) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// stop makes later adds fail.
func (g *group) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// idleChan returns a channel closed once no member is left.
func (g *group) idleChan() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		return closedChan
	}
	if g.idle == nil { // made only when someone waits: add and done stay cheap
		g.idle = make(chan struct{})
	}
	return g.idle
}
