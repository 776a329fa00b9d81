package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// Scenario 1: uncontended Lock+Unlock.
//
// Per backend, the baseline (two round trips back to back: the floor of a
// lock and an unlock) and every library take turns, one cycle each per
// round, in a fresh random order per round, each on its own connection and
// key (on memcached, the baseline on dlock's: see laneMemcachedProbe): load
// from elsewhere on the machine weighs on all of them alike.
// Allocations and CPU time are counted in a separate pass (a cycle's
// mallocs, from runtime.MemStats, and CPU time, client and server; see
// cpu.go), so that reading the counters does not slow the timed loop: in
// blocks of cycles, each library's in turn, in a fresh random order per
// round, and CPU per cycle is the median of a library's blocks.

const scenUncontended = "1 uncontended Lock+Unlock"

func runUncontended(ctx context.Context, cfg *config, t *table) error {
	for _, backend := range cfg.backends() {
		if err := uncontendedOn(ctx, cfg, t, backend); err != nil {
			return err
		}
	}
	return nil
}

type cycler struct {
	name    string
	kind    rowKind
	run     func(ctx context.Context) error
	samples []time.Duration
	allocs  float64
	cpu     cpuSamples
}

func uncontendedOn(ctx context.Context, cfg *config, t *table, backend string) error {
	addr := cfg.addr[backend]
	pr, err := openProbe(ctx, backend, addr)
	if err != nil {
		return err
	}
	defer pr.Close() // the probe opened here, even when pr is replaced below
	cs := []*cycler{{
		name: "2×" + probeName[backend], kind: baselineRow,
		run: func(ctx context.Context) error {
			if err := pr.roundTrip(ctx); err != nil {
				return err
			}
			return pr.roundTrip(ctx)
		},
	}}
	for _, l := range cfg.libs(backend) {
		c, err := l.open(ctx, addr)
		if err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		defer c.Close()
		key := cfg.key("uncontended", l.name)
		if mp, ok := laneMemcachedProbe(c); ok {
			// memcached hands each connection to one of its worker threads
			// in turn, and a round trip's cost depends on the thread (on
			// two cores, 26µs on one and 60-70µs on the other, or three
			// times that when the threads are pinned apart): time the
			// baseline on the connection the driver's calls go through,
			// its lane's (lanes.go in driver/memcached), which one cycle
			// makes; the client's own connection is another.
			h, err := c.Lock(ctx, key)
			if err == nil {
				err = h.Unlock(ctx)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
			pr = mp
		}
		kind := l.kind()
		cs = append(cs, &cycler{name: l.name, kind: kind, run: func(ctx context.Context) error {
			h, err := c.Lock(ctx, key)
			if err != nil {
				return err
			}
			return h.Unlock(ctx)
		}})
	}

	warm := max(cfg.cycles/10, 20)
	order := make([]*cycler, len(cs))
	copy(order, cs)
	for i := range warm + cfg.cycles {
		rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, c := range order {
			t0 := time.Now()
			if err := c.run(ctx); err != nil {
				return fmt.Errorf("uncontended %s: %w", c.name, err)
			}
			if i >= warm {
				c.samples = append(c.samples, time.Since(t0))
			}
		}
	}

	// getrusage counts CPU time in scheduler ticks on many kernels (4 ms):
	// blocks of cpuBlock keep that within a few percent.
	const blocks, cpuBlock = 5, 300 * time.Millisecond
	meter := newServerMeter(backend, addr)
	mallocs, cycles := map[*cycler]uint64{}, map[*cycler]int{}
	for range blocks {
		rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, c := range order {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s0, ok0 := meter(ctx)
			c0, t0 := clientCPU(), time.Now()
			n := 0
			for ; n < 20 || time.Since(t0) < cpuBlock; n++ {
				if err := c.run(ctx); err != nil {
					return fmt.Errorf("uncontended %s: %w", c.name, err)
				}
			}
			c1 := clientCPU()
			s1, ok1 := meter(ctx)
			runtime.ReadMemStats(&after)
			mallocs[c] += after.Mallocs - before.Mallocs
			cycles[c] += n
			per := func(d time.Duration) time.Duration { return d / time.Duration(n) }
			c.cpu.client = append(c.cpu.client, per(c1-c0))
			if c.cpu.serverKnown = ok0 && ok1; c.cpu.serverKnown {
				c.cpu.server = append(c.cpu.server, per(s1.cpu-s0.cpu))
				c.cpu.cmd = append(c.cpu.cmd, per(s1.cmd-s0.cmd))
			}
		}
	}
	for _, c := range cs {
		c.allocs = float64(mallocs[c]) / float64(cycles[c])
	}

	for _, c := range cs {
		s := summarize(c.samples)
		figs := []figure{
			sampledFig("median", s.median, s.n, lowerBetter),
			sampledFig("p99", s.p99, s.n, lowerBetter),
			{name: "allocs/cycle", value: c.allocs, unit: count, dir: lowerBetter},
		}
		t.add(&row{scenario: scenUncontended, backend: backend, lib: c.name, kind: c.kind, figs: append(figs, c.cpu.figures()...)})
	}
	cfg.unmeasured(t, scenUncontended, backend, "median")
	return nil
}

// laneMemcachedProbe returns a probe whose version round trips go over
// the connection that a dlock memcached client's calls last dialled, if c
// is one: its lane's, as long as one call at a time is made. It must be
// called before c's first call: it wraps the client's DialContext, which
// the driver reads when it makes a lane.
func laneMemcachedProbe(c client) (probe, bool) {
	dc, ok := c.(*dlockClient)
	if !ok {
		return nil, false
	}
	var mc *memcache.Client
	if !dc.l.As(&mc) {
		return nil, false
	}
	p := &laneProbe{dial: mc.DialContext}
	if p.dial == nil {
		var d net.Dialer
		p.dial = d.DialContext
	}
	mc.DialContext = p.dialContext
	return p, true
}

// A laneProbe records the connections a client dials, and sends
// gomemcache's version ("Ping") on the latest, through a memcache.Client
// of its own over it. The two clients take turns on the connection (the
// uncontended scenario makes one call at a time), and each reads its
// whole reply, so neither reads the other's.
type laneProbe struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu     sync.Mutex
	latest net.Conn

	bound net.Conn         // the connection mc uses
	mc    *memcache.Client // over bound
}

func (p *laneProbe) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.dial(ctx, network, addr)
	if err == nil {
		p.mu.Lock()
		p.latest = c
		p.mu.Unlock()
	}
	return c, err
}

func (p *laneProbe) roundTrip(context.Context) error {
	p.mu.Lock()
	c := p.latest
	p.mu.Unlock()
	if c == nil {
		return errors.New("memcached lane probe: the driver has dialled no connection yet")
	}
	if c != p.bound {
		p.bound = c
		p.mc = memcache.New(c.RemoteAddr().String())
		p.mc.MaxIdleConns = 1
		p.mc.DialContext = func(context.Context, string, string) (net.Conn, error) { return sharedConn{c}, nil }
	}
	return p.mc.Ping()
}

// Close leaves the connection to the client that dialled it.
func (p *laneProbe) Close() error { return nil }

// sharedConn is a connection the probe borrows: closing it is its
// owner's business.
type sharedConn struct{ net.Conn }

func (sharedConn) Close() error { return nil }
