package main

import (
	"fmt"
	"strings"
)

// The targets of the speed rounds (issue 39's for Redis, PostgreSQL and
// etcd; the earlier rounds' for memcached, ZooKeeper, hand-offs and
// renewal), checked against the table of one run.
const (
	// Redis, against the peers (redsync, redislock, rueidislock).
	redisnxVsFastestPeer = 1.0 // uncontended median <= the fastest peer's
	clientCPUShare       = 1.1 // redisnx client CPU/cycle <= 1.1x redislock's
	commandTimeShare     = 2.0 // redisnx Redis command time/cycle <= 2x redislock's (fencing's price)
	rediswatchVsPeer     = 1.5 // rediswatch's uncontended median <= 1.5x the fastest peer's
	rediswatchHotShare   = 0.6 // rediswatch hot key >= 0.6x the best peer's grants/s
	hotSpread            = 1.1 // FIFO kept: most-served within 1.1x the least-served
	// PostgreSQL, against the plain advisory-lock loop.
	pgUncontendedVsAdvisory = 1.5
	pgManyKeysShare         = 0.5
	pgHotKeyShare           = 0.25
	pgSustainShare          = 0.8 // the sustained hot key's last third >= 0.8x its first
	// etcd, against concurrency.Mutex; allocations against the figure of
	// bench/results/bench-2026-11-27-162944-vm.txt, halved.
	etcdVsMutex        = 1.5
	etcdRecordedAllocs = 794
	handoffRoundTrips  = 3 // hand-off median within 3 round trips
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
	advisoryLib         = "advisory (1ms)"
	etcdMutexLib        = "concurrency.Mutex"
)

// targets judges the targets. No target is met by missing data: a
// comparison whose measured value or reference (a peer's figure or a
// baseline) is zero, because every attempt of that library failed or
// nothing was timed, is not measured (a zero is never read as a target
// met, nor divided by), except that no grant at all against a peer's
// grants misses a grants/s target; counts of faults (leases lost,
// goroutines added) are judged at zero. A contention row of dlock's with
// overlapping grants, unlock errors or failed acquisitions, or that does
// not report its failed acquisitions, misses its targets, and says why.
func targets(t *table) []target {
	j := &judge{t: t}
	j.redisTargets()
	j.postgresTargets()
	j.etcdTargets()
	j.otherTargets()
	j.renewalTargets()
	return j.ts
}

// A judge collects the targets of one table.
type judge struct {
	t  *table
	ts []target
}

func (j *judge) add(name, measured string, met, ok bool) {
	j.ts = append(j.ts, target{name: name, measured: measured, met: met, missing: !ok})
}

func dur(v float64) string { return format(v, duration) }

// vs prints a measured value against its reference and their ratio.
func vs(v, ref float64, u unit, who string) string {
	if who != "" {
		who = " (" + who + ")"
	}
	if !positive(v, ref) {
		return fmt.Sprintf("%s vs %s%s", format(v, u), format(ref, u), who)
	}
	return fmt.Sprintf("%s vs %s%s: %.2fx", format(v, u), format(ref, u), who, v/ref)
}

// atMost judges lib's figure fig of scen against share times a reference
// (lower is better).
func (j *judge) atMost(name, scen, lib, fig string, share, ref float64, refOK bool, who string) {
	v, ok := j.t.value(scen, lib, fig)
	u := duration
	if r := j.t.find(scen, lib); r != nil {
		if f, found := r.fig(fig); found {
			u = f.unit
		}
	}
	j.add(name, vs(v, ref, u, who), v <= share*ref, ok && refOK && positive(v, ref))
}

// grantsAtLeast judges lib's grants/s in a contention scenario against
// share times a reference's; a faulty round misses.
func (j *judge) grantsAtLeast(name, scen, lib string, share, ref float64, refOK bool, who string) {
	f, clean := faultsOf(j.t, scen, lib)
	g, ok := j.t.value(scen, lib, "grants/s")
	j.add(name, vs(g, ref, rate, who)+f, clean && g >= share*ref, ok && refOK && positive(ref))
}

// fifoKept judges lib's spread of grants among the contenders.
func (j *judge) fifoKept(name, scen, lib string) {
	f, clean := faultsOf(j.t, scen, lib)
	sp, ok := spreadOf(j.t, scen, lib)
	j.add(name, sp.text+f, clean && sp.ratio <= hotSpread, ok)
}

func (j *judge) redisTargets() {
	t, s := j.t, scenUncontended
	p, who, okp := t.bestPeer(s, "redis", "median", lowerBetter)
	j.atMost("uncontended: redisnx median <= the fastest Redis peer's", s, "redisnx", "median", redisnxVsFastestPeer, p, okp, who)
	for _, d := range []struct {
		fig   string
		share float64
	}{{"client CPU/cycle", clientCPUShare}, {"allocs/cycle", 1}, {"server command time/cycle", commandTimeShare}} {
		r, ok := t.value(s, "redislock", d.fig)
		j.atMost(fmt.Sprintf("uncontended: redisnx %s <= %.1f x redislock's", d.fig, d.share), s, "redisnx", d.fig, d.share, r, ok, "redislock")
	}
	j.atMost("uncontended: rediswatch median <= 1.5 x the fastest Redis peer's", s, "rediswatch", "median", rediswatchVsPeer, p, okp, who)

	hot := fmt.Sprintf(scenHotKey, 32)
	pg, who, ok := t.bestPeer(hot, "redis", "grants/s", higherBetter)
	j.grantsAtLeast("hot key 32: redisnx grants/s >= 1.0 x best peer's", hot, "redisnx", 1, pg, ok, who)
	j.fifoKept("hot key 32: redisnx FIFO kept (most/fewest <= 1.1)", hot, "redisnx")
	j.grantsAtLeast("hot key 32: rediswatch grants/s >= 0.6 x best peer's", hot, "rediswatch", rediswatchHotShare, pg, ok, who)
	j.fifoKept("hot key 32: rediswatch FIFO kept (most/fewest <= 1.1)", hot, "rediswatch")
	many := fmt.Sprintf(scenManyKeys, 32)
	rl, ok := t.value(many, "redislock", "grants/s")
	j.grantsAtLeast("many keys 32: redisnx grants/s >= 1.0 x redislock's", many, "redisnx", 1, rl, ok, "redislock")
}

func (j *judge) postgresTargets() {
	t := j.t
	a, ok := t.value(scenUncontended, advisoryLib, "median")
	j.atMost("uncontended: postgres median <= 1.5 x the advisory loop's", scenUncontended, "postgres", "median", pgUncontendedVsAdvisory, a, ok, advisoryLib)
	many := fmt.Sprintf(scenManyKeys, 32)
	a, ok = t.value(many, advisoryLib, "grants/s")
	j.grantsAtLeast("many keys 32: postgres grants/s >= 0.5 x the advisory loop's", many, "postgres", pgManyKeysShare, a, ok, advisoryLib)
	hot := fmt.Sprintf(scenHotKey, 32)
	a, ok = t.value(hot, advisoryLib, "grants/s")
	j.grantsAtLeast("hot key 32: postgres grants/s >= 0.25 x the advisory loop's", hot, "postgres", pgHotKeyShare, a, ok, advisoryLib)
	j.fifoKept("hot key 32: postgres FIFO kept (most/fewest <= 1.1)", hot, "postgres")
	j.sustainTarget()
}

// sustainTarget judges the sustained hot key: its last third's grants/s
// against its first third's, with the dead tuples in the measured column.
func (j *judge) sustainTarget() {
	var r *row
	for _, c := range j.t.rows {
		if strings.HasPrefix(c.scenario, "7 sustained") && c.lib == "postgres" {
			r = c
		}
	}
	name := fmt.Sprintf("sustained hot key 32: postgres last third >= %.1f x its first", pgSustainShare)
	if r == nil {
		j.add(name, "", false, false)
		return
	}
	f, clean := faultsOf(j.t, r.scenario, "postgres")
	first, ok1 := j.t.value(r.scenario, "postgres", fmt.Sprintf("grants/s, part 1 of %d", sustainParts))
	last, ok2 := j.t.value(r.scenario, "postgres", fmt.Sprintf("grants/s, part %d of %d", sustainParts, sustainParts))
	d0, _ := r.fig("dead tuples at the start")
	d1, _ := r.fig("dead tuples at the end")
	dead := fmt.Sprintf("; dead tuples %s at the start (%s), %s at the end (%s)", format(d0.value, count), d0.note, format(d1.value, count), d1.note)
	j.add(name, vs(last, first, rate, "")+dead+f, clean && last >= pgSustainShare*first, ok1 && ok2 && positive(first))
}

func (j *judge) etcdTargets() {
	t, s := j.t, scenUncontended
	m, ok := t.value(s, etcdMutexLib, "median")
	j.atMost("uncontended: etcd median <= 1.5 x concurrency.Mutex's", s, "etcd", "median", etcdVsMutex, m, ok, etcdMutexLib)
	ma, okm := t.value(s, etcdMutexLib, "allocs/cycle")
	a, oka := t.value(s, "etcd", "allocs/cycle")
	j.add(fmt.Sprintf("uncontended: etcd allocs/cycle <= half the recorded %d", etcdRecordedAllocs),
		fmt.Sprintf("%s; concurrency.Mutex %s", vs(a, etcdRecordedAllocs/2, count, "half of 794, bench-2026-11-27-162944"), format(ma, count)),
		a <= etcdRecordedAllocs/2, oka && okm && positive(a))
	for _, sc := range []string{fmt.Sprintf(scenHotKey, 32), fmt.Sprintf(scenManyKeys, 32)} {
		m, ok := t.value(sc, etcdMutexLib, "grants/s")
		j.grantsAtLeast(fmt.Sprintf("%s: etcd grants/s >= 1.0 x concurrency.Mutex's", shortScen(sc)), sc, "etcd", 1, m, ok, etcdMutexLib)
	}
}

// shortScen is a contention scenario's name in a target: "hot key 32".
func shortScen(scen string) string {
	var n int
	if _, err := fmt.Sscanf(scen, scenHotKey, &n); err == nil {
		return fmt.Sprintf("hot key %d", n)
	}
	if _, err := fmt.Sscanf(scen, scenManyKeys, &n); err == nil {
		return fmt.Sprintf("many keys %d", n)
	}
	return scen
}

// otherTargets are memcached's and ZooKeeper's, and the hand-offs'.
func (j *judge) otherTargets() {
	t, s := j.t, scenUncontended
	zl, ok := t.value(s, "zk.Lock", "median")
	j.atMost("uncontended: zookeeper median <= zk.Lock's", s, "zookeeper", "median", 1, zl, ok, "")
	m, ok6 := t.value(s, "memcached", "median")
	mb, ok7 := t.baseline(s, "memcached", "median") // two version round trips
	rt := mb / 2
	j.add("uncontended: memcached median <= 1.1 x its 4 round trips",
		fmt.Sprintf("%s vs 4 x %s: %.2fx", dur(m), dur(rt), m/(memcachedRoundTrips*rt)),
		m <= memcachedVsTrips*memcachedRoundTrips*rt, ok6 && ok7 && positive(m, rt))

	v, ok := t.value(scenHandoff, "memcached", "median")
	j.add("hand-off: memcached median < 2ms (polling)", vs(v, memcachedHandoffMax, duration, ""), v < memcachedHandoffMax, ok && positive(v))
	for _, d := range []struct{ lib, backend string }{{"redisnx", "redis"}, {"rediswatch", "redis"}, {"zookeeper", "zookeeper"}} {
		v, ok1 := t.value(scenHandoff, d.lib, "median")
		b, ok2 := t.baseline(scenHandoff, d.backend, "median")
		j.add(fmt.Sprintf("hand-off: %s median <= 3 round trips", d.lib),
			fmt.Sprintf("%s = %.2f x %s", dur(v), v/b, dur(b)), v <= handoffRoundTrips*b, ok1 && ok2 && positive(v, b))
	}

	hot := fmt.Sprintf(scenHotKey, 32)
	zg, ok := t.value(hot, "zk.Lock", "grants/s")
	j.grantsAtLeast("hot key 32: zookeeper grants/s >= zk.Lock's", hot, "zookeeper", 1, zg, ok, "")
	j.fifoKept("hot key 32: zookeeper FIFO kept (most/fewest <= 1.1)", hot, "zookeeper")
	many := fmt.Sprintf(scenManyKeys, 32)
	zg, ok = t.value(many, "zk.Lock", "grants/s")
	j.grantsAtLeast("many keys 32: zookeeper grants/s >= zk.Lock's", many, "zookeeper", 1, zg, ok, "")
}

func (j *judge) renewalTargets() {
	t := j.t
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
		j.add(fmt.Sprintf("renewal: %s goroutines do not grow with leases", d.lib),
			fmt.Sprintf("%.0f at %s, %.0f at %s", gs, leasesText(small), gl, leasesText(large)), (gl <= gs+2 || gl <= renewalGoroutines) && small != large, ok1 && ok2)
		h, ok3 := t.value(large, d.lib, "heap/lease")
		j.add(fmt.Sprintf("renewal: %s heap/lease < 1 KiB at %s", d.lib, leasesText(large)),
			vs(h, heapPerLease, byteSize, ""), h < heapPerLease, ok3 && positive(h))
		c, ok4 := t.value(large, d.lib, "client commands/period")
		rt, _ := t.value(large, d.lib, "client round trips/period")
		limit := float64(n) / float64(d.batch)
		j.add(fmt.Sprintf("renewal: %s commands/period <= leases/%d at %s", d.lib, d.batch, leasesText(large)),
			fmt.Sprintf("%.0f commands (%.0f round trips) vs %.0f: %.2fx", c, rt, limit, c/limit), c <= limit, ok4 && n > 0 && positive(c))
		if d.lib == "rediswatch" {
			// Its batch is one transaction of two round trips (WATCH with
			// MGET, then MULTI with a PEXPIRE per lease): without scripts
			// the commands cannot be batched (the line above stays missed),
			// the transactions can.
			j.add(fmt.Sprintf("renewal: %s transactions/period <= leases/%d at %s", d.lib, d.batch, leasesText(large)),
				fmt.Sprintf("%.0f transactions (%.0f round trips) vs %.0f: %.2fx", rt/2, rt, limit, rt/2/limit), rt/2 <= limit, ok4 && n > 0 && positive(rt))
		}
		for _, sc := range []string{small, large} {
			l, ok := t.value(sc, d.lib, "leases lost")
			j.add(fmt.Sprintf("renewal: %s leases lost = 0 at %s", d.lib, leasesText(sc)), fmt.Sprintf("%.0f", l), l == 0, ok)
		}
	}
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
// that gave up after the bench's patience). A round with any, or whose
// row does not report its failed acquisitions, is no evidence for a
// throughput or fairness target: clean is false, and note says what
// happened, for the target's measured column.
func faultsOf(t *table, scen, lib string) (note string, clean bool) {
	r := t.find(scen, lib)
	if r == nil {
		return "", true // the target is not measured
	}
	failed, reported := r.fig("failed acquisitions")
	bad, overlapped := r.fig("OVERLAPPING GRANTS / unlock errors")
	if !reported || failed.na != "" {
		note = "; failed acquisitions not reported"
	} else if failed.value == 0 && !overlapped {
		return "", true
	} else {
		note = fmt.Sprintf("; %.0f failed acquisitions", failed.value)
	}
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
