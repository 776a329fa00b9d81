package main

import "fmt"

// The targets, checked against the table of one run.
const (
	uncontendedVsPings = 1.2  // redisnx Lock+Unlock within 1.2× two PINGs
	serverTimeShare    = 1.25 // redisnx's server time within 1.25× redislock's
	handoffRoundTrips  = 3    // hand-off median within 3 round trips
	rediswatchVsPeer   = 1.5  // rediswatch's uncontended median within 1.5× the faster peer's
	hotP99Share        = 0.25
	hotSpread          = 1.1 // FIFO kept: most-served within 1.1× the least-served
	heapPerLease       = 1024
	// Batch sizes for the renewal target (commands per period at most
	// leases / batch): redisnx refreshes up to 100 keys per script
	// (driver/redisnx maxScriptKeys); rediswatch one transaction per
	// batch of up to 100 leases (driver/rediswatch: WATCH's cost grows
	// with the square of the keys one connection watches).
	redisnxBatch    = 100
	rediswatchBatch = 100
	// renewalGoroutines bounds the goroutines a Locker adds for renewal
	// at any lease count: lock's 4 batch workers, each running up to 8
	// of rediswatch's transactions at once, and the scheduler's loop.
	renewalGoroutines = 40
	// driver/memcached's targets: Lock+Unlock within 1.1x of its four
	// round trips (add, incr, gets, cas) priced at a version round trip;
	// hand-off median under 2 ms with the default backoff.
	memcachedRoundTrips = 4
	memcachedVsTrips    = 1.1
	memcachedHandoffMax = 2e6 // ns
)

// targets judges the targets. No target is met by missing data:
// a comparison whose measured value or reference (a peer's figure or a
// baseline) is zero, because every attempt of that library failed or
// nothing was timed, is not measured (a zero is never read as a target
// met, nor divided by), except that no grant at all against a peer's
// grants misses a grants/s target; counts of faults (leases lost,
// goroutines added) are judged at zero. A contention row of dlock's with overlapping
// grants or failed acquisitions misses its targets, and says why.
func targets(t *table) []target {
	var ts []target
	add := func(name string, measured string, met, ok bool) {
		ts = append(ts, target{name: name, measured: measured, met: met, missing: !ok})
	}
	dur := func(v float64) string { return format(v, duration) }

	// Uncontended.
	{
		s := scenUncontended
		v, ok1 := t.value(s, "redisnx", "median")
		b, ok2 := t.baseline(s, "redis", "median")
		add("uncontended: redisnx median <= 1.2 x two PINGs",
			fmt.Sprintf("%s vs %s: %.2fx", dur(v), dur(b), v/b), v <= uncontendedVsPings*b, ok1 && ok2 && positive(v, b))
		p, who, ok3 := t.bestPeer(s, "redis", "median", lowerBetter)
		add("uncontended: redisnx median <= redsync's and redislock's",
			fmt.Sprintf("%s vs %s (%s): %.2fx", dur(v), dur(p), who, v/p), v <= p, ok1 && ok3 && positive(v, p))
		w, okw := t.value(s, "rediswatch", "median")
		add("uncontended: rediswatch median <= 1.5 x the faster peer's",
			fmt.Sprintf("%s vs %s (%s): %.2fx", dur(w), dur(p), who, w/p), w <= rediswatchVsPeer*p, okw && ok3 && positive(w, p))
		z, ok4 := t.value(s, "zookeeper", "median")
		zl, ok5 := t.value(s, "zk.Lock", "median")
		add("uncontended: zookeeper median <= zk.Lock's",
			fmt.Sprintf("%s vs %s: %.2fx", dur(z), dur(zl), z/zl), z <= zl, ok4 && ok5 && positive(z, zl))
		m, ok6 := t.value(s, "memcached", "median")
		mb, ok7 := t.baseline(s, "memcached", "median") // two version round trips
		rt := mb / 2
		add("uncontended: memcached median <= 1.1 x its 4 round trips",
			fmt.Sprintf("%s vs 4 x %s: %.2fx", dur(m), dur(rt), m/(memcachedRoundTrips*rt)),
			m <= memcachedVsTrips*memcachedRoundTrips*rt, ok6 && ok7 && positive(m, rt))
		sc, ok8 := t.value(s, "redisnx", "server command time/cycle")
		rc, ok9 := t.value(s, "redislock", "server command time/cycle")
		add("uncontended: redisnx server command time <= 1.25 x redislock's",
			fmt.Sprintf("%s vs %s: %.2fx", dur(sc), dur(rc), sc/rc), sc <= serverTimeShare*rc, ok8 && ok9 && positive(sc, rc))
		scpu, ok12 := t.value(s, "redisnx", "server CPU/cycle")
		rcpu, ok13 := t.value(s, "redislock", "server CPU/cycle")
		add("uncontended: redisnx server CPU <= 1.25 x redislock's",
			fmt.Sprintf("%s vs %s: %.2fx", dur(scpu), dur(rcpu), scpu/rcpu), scpu <= serverTimeShare*rcpu, ok12 && ok13 && positive(scpu, rcpu))
		a, ok10 := t.value(s, "redisnx", "allocs/cycle")
		ra, ok11 := t.value(s, "redislock", "allocs/cycle")
		add("uncontended: redisnx allocs/cycle <= redislock's",
			fmt.Sprintf("%.0f vs %.0f: %.2fx", a, ra, a/ra), a <= ra, ok10 && ok11 && positive(a, ra))
	}
	{
		v, ok := t.value(scenHandoff, "memcached", "median")
		add("hand-off: memcached median < 2ms (polling)", dur(v), v < memcachedHandoffMax, ok && positive(v))
	}

	// Hand-off.
	for _, d := range []struct{ lib, backend string }{{"redisnx", "redis"}, {"rediswatch", "redis"}, {"zookeeper", "zookeeper"}} {
		v, ok1 := t.value(scenHandoff, d.lib, "median")
		b, ok2 := t.baseline(scenHandoff, d.backend, "median")
		add(fmt.Sprintf("hand-off: %s median <= 3 round trips", d.lib),
			fmt.Sprintf("%s = %.2f x %s", dur(v), v/b, dur(b)), v <= handoffRoundTrips*b, ok1 && ok2 && positive(v, b))
	}

	// Hot key, 32 contenders.
	s := fmt.Sprintf(scenHotKey, 32)
	for _, d := range []struct {
		lib   string
		share float64 // of the best peer's grants/s
	}{{"redisnx", 1.0}, {"rediswatch", 0.6}} {
		lib := d.lib
		f, clean := faultsOf(t, s, lib)
		g, ok1 := t.value(s, lib, "grants/s")
		pg, who, ok2 := t.bestPeer(s, "redis", "grants/s", higherBetter)
		add(fmt.Sprintf("hot key 32: %s grants/s >= %.1f x best peer's", lib, d.share),
			fmt.Sprintf("%.0f/s vs %.0f/s (%s): %.2fx%s", g, pg, who, g/pg, f), clean && g >= d.share*pg, ok1 && ok2 && positive(pg))
		sp, ok5 := spreadOf(t, s, lib)
		add(fmt.Sprintf("hot key 32: %s FIFO kept (most/fewest <= 1.1)", lib), sp.text+f, clean && sp.ratio <= hotSpread, ok5)
		if lib != "redisnx" {
			continue
		}
		w, ok3 := t.value(s, lib, "p99 wait")
		pw, who, ok4 := t.bestPeer(s, "redis", "p99 wait", lowerBetter)
		add(fmt.Sprintf("hot key 32: %s p99 wait <= 1/4 of best peer's", lib),
			fmt.Sprintf("%s vs %s (%s): %.2fx%s", dur(w), dur(pw), who, w/pw, f), clean && w <= hotP99Share*pw, ok3 && ok4 && positive(w, pw))
	}
	{
		f, clean := faultsOf(t, s, "zookeeper")
		g, ok1 := t.value(s, "zookeeper", "grants/s")
		pg, ok2 := t.value(s, "zk.Lock", "grants/s")
		add("hot key 32: zookeeper grants/s >= zk.Lock's",
			fmt.Sprintf("%.0f/s vs %.0f/s: %.2fx%s", g, pg, g/pg, f), clean && g >= pg, ok1 && ok2 && positive(pg))
		sp, ok3 := spreadOf(t, s, "zookeeper")
		add("hot key 32: zookeeper FIFO kept (most/fewest <= 1.1)", sp.text+f, clean && sp.ratio <= hotSpread, ok3)
	}

	// Many keys.
	{
		s := fmt.Sprintf(scenManyKeys, 32)
		for _, d := range []struct{ lib, peer, backend string }{{"redisnx", "redislock", "redis"}, {"zookeeper", "zk.Lock", "zookeeper"}} {
			f, clean := faultsOf(t, s, d.lib)
			g, ok1 := t.value(s, d.lib, "grants/s")
			pg, ok2 := t.value(s, d.peer, "grants/s")
			add(fmt.Sprintf("many keys 32: %s grants/s >= %s's", d.lib, d.peer),
				fmt.Sprintf("%.0f/s vs %.0f/s: %.2fx%s", g, pg, g/pg, f), clean && g >= pg, ok1 && ok2 && positive(pg))
		}
	}

	// Renewal.
	small, large := "", ""
	for _, r := range t.rows {
		if r.lib == "redisnx" && len(r.scenario) > 0 && r.scenario[0] == '5' {
			if small == "" {
				small = r.scenario
			}
			large = r.scenario
		}
	}
	for _, d := range []struct {
		lib   string
		batch int
	}{{"redisnx", redisnxBatch}, {"rediswatch", rediswatchBatch}} {
		n := leasesOf(large)
		gs, ok1 := t.value(small, d.lib, "goroutines added")
		gl, ok2 := t.value(large, d.lib, "goroutines added")
		add(fmt.Sprintf("renewal: %s goroutines do not grow with leases", d.lib),
			fmt.Sprintf("%.0f at %s, %.0f at %s", gs, leasesText(small), gl, leasesText(large)), (gl <= gs+2 || gl <= renewalGoroutines) && small != large, ok1 && ok2)
		h, ok3 := t.value(large, d.lib, "heap/lease")
		add(fmt.Sprintf("renewal: %s heap/lease < 1 KiB at %s", d.lib, leasesText(large)),
			fmt.Sprintf("%.0f B", h), h < heapPerLease, ok3 && positive(h))
		c, ok4 := t.value(large, d.lib, "client commands/period")
		rt, _ := t.value(large, d.lib, "client round trips/period")
		limit := float64(n) / float64(d.batch)
		add(fmt.Sprintf("renewal: %s commands/period <= leases/%d at %s", d.lib, d.batch, leasesText(large)),
			fmt.Sprintf("%.0f commands (%.0f round trips) vs %.0f", c, rt, limit), c <= limit, ok4 && n > 0 && positive(c))
		if d.lib == "rediswatch" {
			// Its batch is one transaction of two round trips (WATCH with
			// MGET, then MULTI with a PEXPIRE per lease): without scripts
			// the commands cannot be batched (the line above stays missed),
			// the transactions can.
			add(fmt.Sprintf("renewal: %s transactions/period <= leases/%d at %s", d.lib, d.batch, leasesText(large)),
				fmt.Sprintf("%.0f transactions (%.0f round trips)", rt/2, rt), rt/2 <= limit, ok4 && n > 0 && positive(rt))
		}
		for _, sc := range []string{small, large} {
			l, ok := t.value(sc, d.lib, "leases lost")
			add(fmt.Sprintf("renewal: %s leases lost = 0 at %s", d.lib, leasesText(sc)), fmt.Sprintf("%.0f", l), l == 0, ok)
		}
	}
	return ts
}

// positive reports whether every value was measured above zero: a zero
// timing, rate or size is missing data (nothing timed, nothing granted).
func positive(vs ...float64) bool {
	for _, v := range vs {
		if !(v > 0) {
			return false
		}
	}
	return true
}

// faultsOf reads the faults of lib's row in a contention scenario:
// overlapping grants, unlock errors and failed acquisitions (Lock calls
// that gave up after the bench's patience). A round with any is no
// evidence for a throughput or fairness target: clean is false, and note
// says what happened, for the target's measured column.
func faultsOf(t *table, scen, lib string) (note string, clean bool) {
	r := t.find(scen, lib)
	if r == nil {
		return "", true // the target is not measured
	}
	failed, _ := r.fig("failed acquisitions")
	bad, overlapped := r.fig("OVERLAPPING GRANTS / unlock errors")
	if failed.value == 0 && !overlapped {
		return "", true
	}
	note = fmt.Sprintf("; %.0f failed acquisitions", failed.value)
	if overlapped {
		note += fmt.Sprintf(", %.0f OVERLAPPING GRANTS, %s", bad.value, bad.note)
	}
	return note, false
}

type spreadResult struct {
	ratio float64
	text  string
}

func spreadOf(t *table, scen, lib string) (spreadResult, bool) {
	r := t.find(scen, lib)
	if r == nil {
		return spreadResult{}, false
	}
	f, ok := r.fig("most/fewest grants")
	if !ok {
		return spreadResult{}, false
	}
	if f.unit != ratio { // a contender got none
		return spreadResult{ratio: 1e9, text: f.note}, true
	}
	return spreadResult{ratio: f.value, text: fmt.Sprintf("%.2fx (%s)", f.value, f.note)}, true
}

// leasesOf returns the lease count of a renewal scenario's name.
func leasesOf(scen string) int {
	var n int
	var k string
	fmt.Sscanf(scen, "5 renewal, %d%s", &n, &k)
	if len(k) > 0 && k[0] == 'k' {
		n *= 1000
	}
	return n
}

func leasesText(scen string) string {
	if scen == "" {
		return "?"
	}
	return leaseCount(leasesOf(scen))
}
