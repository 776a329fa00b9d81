package main

import (
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
