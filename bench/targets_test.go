package main

import (
	"fmt"
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
		tb.add(&row{scenario: s, backend: "redis", lib: "redisnx", kind: dlockRow,
			figs: []figure{{name: "grants/s", value: dlock, unit: rate, dir: higherBetter}}})
		tb.add(&row{scenario: s, backend: "redis", lib: "redislock", kind: peerRow,
			figs: []figure{{name: "grants/s", value: peer, unit: rate, dir: higherBetter}}})
		for _, tg := range targets(&tb) {
			if tg.name != "many keys 32: redisnx grants/s >= redislock's" {
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
// overlapping grants, or with failed acquisitions, misses its grants/s,
// FIFO and p99 targets, and the measured column says why; the same round
// without them meets them.
func TestAudit38HotKeyFaultsMissTargets(t *testing.T) {
	const prefix = "hot key 32: redisnx "
	clean := verdicts(t, hotKeyTable(1000), prefix)
	if len(clean) != 3 {
		t.Fatalf("redisnx hot-key targets: %q; want grants/s, FIFO and p99", clean)
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
// CPU of 0 against redislock's 20 µs: nothing was read) is not measured,
// not met; a real 10 µs is met.
func TestAudit38ZeroMeasuredNotMet(t *testing.T) {
	name := "uncontended: redisnx server CPU <= 1.25 x redislock's"
	verdict := func(cpu time.Duration) string {
		t.Helper()
		var tb table
		tb.add(&row{scenario: scenUncontended, backend: "redis", lib: "redisnx", kind: dlockRow,
			figs: []figure{durFig("server CPU/cycle", cpu, lowerBetter)}})
		tb.add(&row{scenario: scenUncontended, backend: "redis", lib: "redislock", kind: peerRow,
			figs: []figure{durFig("server CPU/cycle", 20*time.Microsecond, lowerBetter)}})
		return verdicts(t, &tb, name)[name]
	}
	if v := verdict(0); !strings.HasPrefix(v, "not measured") {
		t.Errorf("server CPU 0 vs 20µs: %q; want not measured", v)
	}
	if v := verdict(10 * time.Microsecond); !strings.HasPrefix(v, "met") {
		t.Errorf("server CPU 10µs vs 20µs: %q; want met", v)
	}
}
