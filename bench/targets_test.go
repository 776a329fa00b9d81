package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// A hand-off run in which every waiter gave up has no samples: its
// figures, and the baseline (the round trips timed before successful
// hand-offs), are not measured, and the hand-off targets say so instead
// of reading the zeros as met. With samples, the same targets are judged.
func TestHandoffTargetsWithoutSamples(t *testing.T) {
	libs := []lib{
		{name: "redisnx", backend: "redis"},
		{name: "rediswatch", backend: "redis"},
		{name: "memcached", backend: "memcached"},
		{name: "zookeeper", backend: "zookeeper"},
	}
	run := func(hs handoffSamples, rtts []time.Duration) map[string]string {
		t.Helper()
		var tb table
		for _, backend := range []string{"redis", "memcached", "zookeeper"} {
			tb.add(handoffBaseline(backend, rtts))
		}
		for _, l := range libs {
			tb.add(hs.row(l))
		}
		var out strings.Builder
		tb.write(&out)
		t.Logf("table:\n%s", out.String())
		verdicts := map[string]string{}
		for _, tg := range targets(&tb) {
			if !strings.HasPrefix(tg.name, "hand-off: ") {
				continue
			}
			var b strings.Builder
			writeTargets(&b, []target{tg})
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			verdicts[tg.name] = lines[len(lines)-1]
		}
		if len(verdicts) != 4 {
			t.Fatalf("hand-off targets: %q; want memcached's and three round-trip ones", verdicts)
		}
		return verdicts
	}

	gaveUp := run(handoffSamples{failed: 5}, nil)
	for name, line := range gaveUp {
		if !strings.HasSuffix(line, "not measured") {
			t.Errorf("every waiter gave up: %q reads %q; want not measured", name, line)
		}
	}

	ms := time.Millisecond
	fast := handoffSamples{lat: []time.Duration{ms / 2, ms / 2, ms}, rtts: []time.Duration{ms, ms, ms}}
	for name, line := range run(fast, fast.rtts) {
		if !strings.HasSuffix(line, " met") {
			t.Errorf("fast hand-offs: %q reads %q; want met", name, line)
		}
	}
	slow := handoffSamples{lat: []time.Duration{5 * ms, 5 * ms, 5 * ms}, rtts: []time.Duration{ms, ms, ms}}
	for name, line := range run(slow, slow.rtts) {
		if !strings.HasSuffix(line, "MISSED") {
			t.Errorf("slow hand-offs: %q reads %q; want MISSED", name, line)
		}
	}
}

// When every library, peers included, got no grant in a contention
// scenario, the grants/s targets compare zero with zero: they are not
// measured, never met. With the peer's grants counted, the same target is
// judged.
func TestThroughputTargetsWithZeroPeer(t *testing.T) {
	verdict := func(dlock, peer float64) string {
		t.Helper()
		var tb table
		s := fmt.Sprintf(scenManyKeys, 32)
		noFailures := figure{name: "failed acquisitions", unit: count, dir: lowerBetter}
		tb.add(&row{scenario: s, backend: "redis", lib: "redisnx", kind: dlockRow,
			figs: []figure{{name: "grants/s", value: dlock, unit: rate, dir: higherBetter}, noFailures}})
		tb.add(&row{scenario: s, backend: "redis", lib: "redislock", kind: peerRow,
			figs: []figure{{name: "grants/s", value: peer, unit: rate, dir: higherBetter}, noFailures}})
		for _, tg := range targets(&tb) {
			if tg.name != "many keys 32: redisnx grants/s >= 1.0 x redislock's" {
				continue
			}
			var b strings.Builder
			writeTargets(&b, []target{tg})
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			return lines[len(lines)-1]
		}
		t.Fatal("no many-keys target for redisnx")
		return ""
	}
	if v := verdict(0, 0); !strings.HasSuffix(v, "not measured") {
		t.Errorf("no grants on either side: %q; want not measured", v)
	}
	if v := verdict(0, 100); !strings.HasSuffix(v, "MISSED") {
		t.Errorf("no grants for redisnx, 100/s for the peer: %q; want MISSED", v)
	}
	if v := verdict(200, 100); !strings.HasSuffix(v, " met") {
		t.Errorf("200/s against 100/s: %q; want met", v)
	}
}

// verdicts returns the verdict of each target of tb whose name has
// prefix: "met", "MISSED" or "not measured", with the measured column.
func verdicts(t *testing.T, tb *table, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tg := range targets(tb) {
		if !strings.HasPrefix(tg.name, prefix) {
			continue
		}
		v := "MISSED"
		switch {
		case tg.missing:
			v = "not measured"
		case tg.met:
			v = "met"
		}
		out[tg.name] = v + " (" + tg.measured + ")"
	}
	return out
}

// hotKeyTable is a hot-key scenario in which redisnx is granted twice as
// often as the one peer, with waits a tenth of the peer's and every
// contender served alike; faults adds figures to redisnx's row.
func hotKeyTable(peerGrants float64, faults ...figure) *table {
	s := fmt.Sprintf(scenHotKey, 32)
	var tb table
	figs := func(g float64, p99 time.Duration) []figure {
		return []figure{
			{name: "grants/s", value: g, unit: rate, dir: higherBetter},
			durFig("p99 wait", p99, lowerBetter),
			{name: "most/fewest grants", value: 1, unit: ratio, dir: lowerBetter, note: "100..100 per contender"},
			{name: "failed acquisitions", value: 0, unit: count, dir: lowerBetter},
		}
	}
	dl := figs(2000, time.Millisecond)
	for _, f := range faults {
		if i := slices.IndexFunc(dl, func(g figure) bool { return g.name == f.name }); i >= 0 {
			dl[i] = f
		} else {
			dl = append(dl, f)
		}
	}
	tb.add(&row{scenario: s, backend: "redis", lib: "redisnx", kind: dlockRow, figs: dl})
	tb.add(&row{scenario: s, backend: "redis", lib: "redislock", kind: peerRow, figs: figs(peerGrants, 10*time.Millisecond)})
	return &tb
}

// TestAudit38HotKeyFaultsMissTargets: a hot-key round of redisnx's with
// overlapping grants, or with failed acquisitions, misses its grants/s
// and FIFO targets, and the measured column says why; the same round
// without them meets them.
func TestAudit38HotKeyFaultsMissTargets(t *testing.T) {
	const prefix = "hot key 32: redisnx "
	clean := verdicts(t, hotKeyTable(1000), prefix)
	if len(clean) != 2 {
		t.Fatalf("redisnx hot-key targets: %q; want grants/s and FIFO", clean)
	}
	for name, v := range clean {
		if !strings.HasPrefix(v, "met") {
			t.Errorf("clean round: %q reads %q; want met", name, v)
		}
	}
	overlap := figure{name: "OVERLAPPING GRANTS / unlock errors", value: 400, unit: count, note: "0 unlock errors"}
	failed := figure{name: "failed acquisitions", value: 100000, unit: count, dir: lowerBetter}
	for what, fs := range map[string][]figure{
		"400 overlapping grants":       {overlap},
		"100000 failed acquisitions":   {failed},
		"overlaps and failed attempts": {overlap, failed},
	} {
		for name, v := range verdicts(t, hotKeyTable(1000, fs...), prefix) {
			if !strings.HasPrefix(v, "MISSED") || !strings.Contains(v, "failed acquisitions") {
				t.Errorf("round with %s: %q reads %q; want MISSED, with the faults in the measured column", what, name, v)
			}
		}
	}
}

// TestAudit38HotKeyZeroPeerNotMeasured: with no grant for any peer in the
// hot-key scenario, redisnx's grants/s target compares with zero: it is
// not measured, never met.
func TestAudit38HotKeyZeroPeerNotMeasured(t *testing.T) {
	name := "hot key 32: redisnx grants/s >= 1.0 x best peer's"
	if v := verdicts(t, hotKeyTable(0), name)[name]; !strings.HasPrefix(v, "not measured") {
		t.Errorf("peer with no grants: %q reads %q; want not measured", name, v)
	}
	if v := verdicts(t, hotKeyTable(1000), name)[name]; !strings.HasPrefix(v, "met") {
		t.Errorf("peer with 1000 grants/s: %q reads %q; want met", name, v)
	}
}

// TestAudit38ZeroMeasuredNotMet: a target's measured value of zero (server
// command time of 0 against redislock's 20 µs: nothing was read) is not
// measured, not met; a real 10 µs is met.
func TestAudit38ZeroMeasuredNotMet(t *testing.T) {
	name := "uncontended: redisnx server command time/cycle <= 2.0 x redislock's"
	verdict := func(cpu time.Duration) string {
		t.Helper()
		var tb table
		tb.add(&row{scenario: scenUncontended, backend: "redis", lib: "redisnx", kind: dlockRow,
			figs: []figure{durFig("server command time/cycle", cpu, lowerBetter)}})
		tb.add(&row{scenario: scenUncontended, backend: "redis", lib: "redislock", kind: peerRow,
			figs: []figure{durFig("server command time/cycle", 20*time.Microsecond, lowerBetter)}})
		return verdicts(t, &tb, name)[name]
	}
	if v := verdict(0); !strings.HasPrefix(v, "not measured") {
		t.Errorf("command time 0 vs 20µs: %q; want not measured", v)
	}
	if v := verdict(10 * time.Microsecond); !strings.HasPrefix(v, "met") {
		t.Errorf("command time 10µs vs 20µs: %q; want met", v)
	}
}

// contentionRow is a clean contention row: g grants/s, every contender
// served alike, no failed acquisition.
func contentionRow(scen, backend, lib string, kind rowKind, g float64) *row {
	return &row{scenario: scen, backend: backend, lib: lib, kind: kind, figs: []figure{
		{name: "grants/s", value: g, unit: rate, dir: higherBetter},
		{name: "most/fewest grants", value: 1, unit: ratio, dir: lowerBetter, note: "100..100 per contender"},
		{name: "failed acquisitions", value: 0, unit: count, dir: lowerBetter},
	}}
}

// sustainScen is the sustained hot key's scenario in the tests.
var sustainScen = fmt.Sprintf(scenSustain, sustainN, time.Minute)

// contentionTable has every hot-key (32), many-keys (32) and sustained
// row the targets read: dlock's drivers at 2000 grants/s, their peers and
// PostgreSQL's advisory loop at 1000/s, the sustained run at first and
// last thirds of 100 and last grants.
func contentionTable(last float64) *table {
	var tb table
	for _, s := range []string{fmt.Sprintf(scenHotKey, 32), fmt.Sprintf(scenManyKeys, 32)} {
		for _, d := range []struct {
			backend, lib string
			kind         rowKind
			g            float64
		}{
			{"redis", "redisnx", dlockRow, 2000}, {"redis", "rediswatch", dlockRow, 2000},
			{"redis", "redislock", peerRow, 1000}, {"redis", "rueidislock", peerRow, 1000},
			{"postgres", "postgres", dlockRow, 2000}, {"postgres", advisoryLib, plainRow, 1000},
			{"etcd", "etcd", dlockRow, 2000}, {"etcd", etcdMutexLib, peerRow, 1000},
			{"zookeeper", "zookeeper", dlockRow, 2000}, {"zookeeper", "zk.Lock", peerRow, 1000},
		} {
			tb.add(contentionRow(s, d.backend, d.lib, d.kind, d.g))
		}
	}
	r := contentionRow(sustainScen, "postgres", "postgres", dlockRow, 100)
	c := &contention{dur: time.Minute, phases: []int{2000, 2000, int(last * 20)}}
	r.figs = append(r.figs, c.phaseFigs()...)
	r.figs = append(r.figs, deadTupleFigs([]tableStats{{name: "keys", dead: 3}}, []tableStats{{name: "keys", dead: 40}}, "autovacuum on")...)
	tb.add(r)
	return &tb
}

// contentionTargets are the verdicts of every hot-key, many-keys and
// sustained target.
func contentionTargets(t *testing.T, tb *table) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range []string{"hot key ", "many keys ", "sustained "} {
		for k, v := range verdicts(t, tb, p) {
			out[k] = v
		}
	}
	return out
}

// TestContentionFaultsMissTargets: every hot-key, many-keys and sustained
// target of every backend is met by a clean round, and missed, saying
// why, by a round of the same library with overlapping grants, unlock
// errors, failed acquisitions, or without its failed acquisitions
// reported; the other libraries' targets stay met.
func TestContentionFaultsMissTargets(t *testing.T) {
	clean := contentionTargets(t, contentionTable(100))
	if len(clean) != 14 {
		t.Fatalf("%d contention targets, want 14: %q", len(clean), clean)
	}
	for name, v := range clean {
		if !strings.HasPrefix(v, "met") {
			t.Errorf("clean rounds: %q reads %q; want met", name, v)
		}
	}
	faults := map[string]func(r *row){
		"overlapping grants": func(r *row) {
			r.figs = append(r.figs, figure{name: "OVERLAPPING GRANTS / unlock errors", value: 1, unit: count, note: "0 unlock errors"})
		},
		"unlock errors": func(r *row) {
			r.figs = append(r.figs, figure{name: "OVERLAPPING GRANTS / unlock errors", value: 0, unit: count, note: "3 unlock errors"})
		},
		"failed acquisitions": func(r *row) {
			i := slices.IndexFunc(r.figs, func(f figure) bool { return f.name == "failed acquisitions" })
			r.figs[i].value = 1
		},
		"failed acquisitions not reported": func(r *row) {
			r.figs = slices.DeleteFunc(r.figs, func(f figure) bool { return f.name == "failed acquisitions" })
		},
	}
	for _, r := range contentionTable(100).rows {
		if r.kind != dlockRow {
			continue
		}
		prefix := shortScen(r.scenario) + ": " + r.lib + " "
		if r.scenario == sustainScen {
			prefix = "sustained hot key 32: postgres "
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(clean)), func(n string) bool { return strings.HasPrefix(n, prefix) }) {
			continue // no target (rediswatch's many keys)
		}
		for what, apply := range faults {
			tb := contentionTable(100)
			apply(tb.find(r.scenario, r.lib))
			missed := 0
			for name, v := range contentionTargets(t, tb) {
				switch {
				case strings.HasPrefix(name, prefix):
					missed++
					if !strings.HasPrefix(v, "MISSED") || !strings.Contains(v, "failed acquisitions") {
						t.Errorf("%s with %s: %q reads %q; want MISSED, saying why", prefix, what, name, v)
					}
				case !strings.HasPrefix(v, "met"):
					t.Errorf("%s with %s: another library's %q reads %q; want met", prefix, what, name, v)
				}
			}
			if missed == 0 {
				t.Errorf("%s with %s: no target of it", prefix, what)
			}
		}
	}
}

// The sustained hot key meets its target when its last third keeps 0.8
// of the first's grants/s, misses it below, and is not measured without
// its row; the measured column names the dead tuples at both ends.
func TestSustainTarget(t *testing.T) {
	name := "sustained hot key 32: postgres last third >= 0.8 x its first"
	for _, c := range []struct {
		last float64
		want string
	}{{100, "met"}, {80, "met"}, {79, "MISSED"}, {10, "MISSED"}} {
		v := verdicts(t, contentionTable(c.last), name)[name]
		if !strings.HasPrefix(v, c.want) || !strings.Contains(v, "dead tuples 3 at the start (dlock: keys 3), 40 at the end (dlock: keys 40)") {
			t.Errorf("last third %v/s against 100/s: %q; want %s, with the dead tuples", c.last, v, c.want)
		}
	}
	var none table
	if v := verdicts(t, &none, name)[name]; !strings.HasPrefix(v, "not measured") {
		t.Errorf("no sustained row: %q; want not measured", v)
	}
	empty := contentionTable(100)
	r := empty.find(sustainScen, "postgres")
	for i, f := range r.figs {
		if strings.HasPrefix(f.name, "grants/s, part") {
			r.figs[i].value = 0
		}
	}
	if v := verdicts(t, empty, name)[name]; !strings.HasPrefix(v, "not measured") {
		t.Errorf("no grant in either third: %q; want not measured", v)
	}
}
