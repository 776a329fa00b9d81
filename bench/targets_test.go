package main

import (
	"fmt"
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
