package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Scenario 2: hand-off. A holder (one client) holds the key; a waiter
// (another client, standing for another process) blocks in Lock. After
// 5 to 10 ms (the waiter is queued, subscribed or polling by then; the
// random part spreads the release over the pollers' retry phases), one
// probe round trip is timed from the same idle state (the baseline: the
// round trip a wake-up costs at best), then after 2 ms more the holder
// unlocks. The figure is the time from the Unlock call to the waiter's
// Lock returning: a release that hands the grant to the waiter in the
// same step (redisnx pushes it to the list the waiter blocks on) can
// reach the waiter before its own reply reaches the holder, so the time
// from Unlock returning would be negative. The release's round trip is
// thus in the figure. Libraries alternate in cfg.rounds rounds (dlock, peer,
// dlock, peer, ...), so that load that comes and goes hits all alike; each
// round of a library stops after its share of cfg.handoffs samples or of
// cfg.handoffBudget, whichever comes first, and a library's row pools its
// rounds' samples.

const scenHandoff = "2 hand-off"

func runHandoff(ctx context.Context, cfg *config, t *table) error {
	for _, backend := range cfg.backends() {
		addr := cfg.addr[backend]
		pr, err := openProbe(ctx, backend, addr)
		if err != nil {
			return err
		}
		var rtts []time.Duration
		libs := cfg.libs(backend)
		samples := make([]handoffSamples, len(libs))
		for range cfg.rounds {
			for i, l := range libs {
				err := handoffLib(ctx, cfg, l, addr, pr, &samples[i])
				if err != nil {
					pr.Close()
					return fmt.Errorf("hand-off %s: %w", l.name, err)
				}
			}
		}
		var rows []*row
		for i, l := range libs {
			rtts = append(rtts, samples[i].rtts...)
			rows = append(rows, samples[i].row(l))
		}
		pr.Close()
		t.add(handoffBaseline(backend, rtts))
		for _, r := range rows {
			t.add(r)
		}
		cfg.unmeasured(t, scenHandoff, backend, "median")
	}
	return nil
}

// handoffBaseline is the baseline row of the hand-off scenario on
// backend: the probe round trips timed before the hand-offs that
// succeeded (none, and so not measured, when every waiter gave up).
func handoffBaseline(backend string, rtts []time.Duration) *row {
	s := summarize(rtts)
	return &row{scenario: scenHandoff, backend: backend, lib: probeName[backend] + " after idle", kind: baselineRow, figs: []figure{
		sampledFig("median", s.median, s.n, lowerBetter),
		sampledFig("p99", s.p99, s.n, lowerBetter),
	}}
}

type waitResult struct {
	at  time.Time
	h   held
	err error
}

// handoffSamples are one library's hand-offs: latencies, the probe round
// trips timed before them, and the waits that gave up.
type handoffSamples struct {
	lat, rtts []time.Duration
	failed    int
}

// handoffLib runs one round of hand-offs of l, adding to hs.
func handoffLib(ctx context.Context, cfg *config, l lib, addr string, pr probe, hs *handoffSamples) error {
	holder, err := l.open(ctx, addr)
	if err != nil {
		return err
	}
	defer holder.Close()
	waiter, err := l.open(ctx, addr)
	if err != nil {
		return err
	}
	defer waiter.Close()
	key := cfg.key("handoff", l.name)

	want := len(hs.lat) + max(cfg.handoffs/cfg.rounds, 1)
	deadline := time.Now().Add(cfg.handoffBudget / time.Duration(cfg.rounds))
	for len(hs.lat) < want && time.Now().Before(deadline) {
		h, err := holder.Lock(ctx, key)
		if err != nil {
			return err
		}
		got := make(chan waitResult, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			w, err := waiter.Lock(wctx, key)
			got <- waitResult{time.Now(), w, err}
		}()
		time.Sleep(5*time.Millisecond + rand.N(5*time.Millisecond))
		t0 := time.Now()
		if err := pr.roundTrip(ctx); err != nil {
			return err
		}
		rtt := time.Since(t0)
		time.Sleep(2 * time.Millisecond)
		released := time.Now()
		if err := h.Unlock(ctx); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		w := <-got
		if w.err != nil {
			hs.failed++ // the waiter gave up (a peer's try limit)
			continue
		}
		hs.lat = append(hs.lat, w.at.Sub(released))
		hs.rtts = append(hs.rtts, rtt)
		if err := w.h.Unlock(ctx); err != nil {
			return fmt.Errorf("waiter's unlock: %w", err)
		}
	}
	return nil
}

func (hs *handoffSamples) row(l lib) *row {
	s := summarize(hs.lat)
	kind := l.kind()
	med := sampledFig("median", s.median, s.n, lowerBetter)
	med.note = fmt.Sprintf("n=%d", s.n)
	figs := []figure{med, sampledFig("p99", s.p99, s.n, lowerBetter)}
	if hs.failed > 0 {
		figs = append(figs, figure{name: "waiter gave up", value: float64(hs.failed), unit: count, dir: lowerBetter})
	}
	return &row{scenario: scenHandoff, backend: l.backend, lib: l.name, kind: kind, figs: figs}
}
