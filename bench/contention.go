package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Scenarios 3 and 4: contenders, each with its own client (standing for a
// process of its own), loop for a fixed time: want the lock, Lock, count
// the grant, Unlock, at once want it again. In the hot-key scenario they
// all want one key; in the many-keys one each has its own.
//
// A contender's wait is from the moment it wants the lock to its grant,
// across any Lock calls that failed meanwhile (a peer that gave up after
// its tries, a caller's patience of 10 s running out): a library that gives
// up does not hide a starving waiter. Waits still under way when the time
// is up count as samples ending then (censored: the true waits are
// longer). A check counts grants that overlapped another one on the key.
//
// The baseline is the same number of goroutines, each on its own
// connection, making cycles of two probe round trips (a lock and an
// unlock cannot take fewer) for the same time: cycles per second, what the
// server and the machine allow at that concurrency.

const (
	scenHotKey   = "3 hot key, %d contenders"
	scenManyKeys = "4 many keys, %d contenders"
	patience     = 10 * time.Second
)

func runHotKey(ctx context.Context, cfg *config, t *table) error {
	for _, n := range cfg.hotContenders {
		scen := fmt.Sprintf(scenHotKey, n)
		for _, backend := range cfg.backends() {
			if err := baselineThroughput(ctx, cfg, t, scen, backend, n); err != nil {
				return err
			}
			err := interleaved(ctx, cfg, t, scen, backend, true, func(l lib, round int) (*contention, error) {
				key := cfg.key("hotkey", fmt.Sprint(n), l.name, fmt.Sprint(round))
				return contend(ctx, l, cfg.addr[backend], n, 1, cfg.hotDur/time.Duration(cfg.rounds), func(int) string { return key })
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func runManyKeys(ctx context.Context, cfg *config, t *table) error {
	n := cfg.manyContenders
	scen := fmt.Sprintf(scenManyKeys, n)
	for _, backend := range cfg.backends() {
		if err := baselineThroughput(ctx, cfg, t, scen, backend, n); err != nil {
			return err
		}
		err := interleaved(ctx, cfg, t, scen, backend, false, func(l lib, round int) (*contention, error) {
			base := cfg.key("manykeys", l.name, fmt.Sprint(round))
			return contend(ctx, l, cfg.addr[backend], n, 1, cfg.manyDur/time.Duration(cfg.rounds), func(i int) string { return fmt.Sprintf("%s/%d", base, i) })
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// interleaved runs the backend's libraries in cfg.rounds alternations
// (dlock, peer, dlock, peer, ...), each for its share of the scenario's
// duration, so that load that comes and goes on the machine weighs on all
// of them alike, and adds one row per library: the median of its rounds'
// grants/s, and the waits and grants of all its rounds together.
func interleaved(ctx context.Context, cfg *config, t *table, scen, backend string, hot bool, run func(l lib, round int) (*contention, error)) error {
	libs := cfg.libs(backend)
	results := make([][]*contention, len(libs))
	for round := range cfg.rounds {
		for i, l := range libs {
			res, err := run(l, round)
			if err != nil {
				return fmt.Errorf("%s %s: %w", scen, l.name, err)
			}
			results[i] = append(results[i], res)
		}
	}
	for i, l := range libs {
		t.add(merge(results[i]).row(scen, l, hot))
	}
	cfg.unmeasured(t, scen, backend, "grants/s")
	return nil
}

// merge pools rounds of one library: grants per contender and waits added
// up, rates the median of the rounds'.
func merge(rounds []*contention) *contention {
	m := &contention{grants: make([]int, len(rounds[0].grants))}
	for _, r := range rounds {
		m.dur += r.dur
		for i, g := range r.grants {
			m.grants[i] += g
		}
		m.waits = append(m.waits, r.waits...)
		m.censored += r.censored
		m.failures += r.failures
		m.overlaps += r.overlaps
		m.unlockErrs += r.unlockErrs
		total := 0
		for _, g := range r.grants {
			total += g
		}
		m.rates = append(m.rates, float64(total)/r.dur.Seconds())
	}
	return m
}

type contention struct {
	dur        time.Duration
	rates      []float64 // grants/s of each round, when merged
	grants     []int
	phases     []int // grants in each equal part of dur, in order
	waits      []time.Duration
	censored   int
	failures   int
	overlaps   int64
	unlockErrs int
}

func (c *contention) row(scen string, l lib, hot bool) *row {
	total := 0
	for _, g := range c.grants {
		total += g
	}
	kind := l.kind()
	gps := figure{name: "grants/s", value: float64(total) / c.dur.Seconds(), unit: rate, dir: higherBetter}
	if len(c.rates) > 1 {
		rates := slices.Clone(c.rates)
		slices.Sort(rates)
		gps.value = rates[len(rates)/2]
		gps.note = fmt.Sprintf("median of %d interleaved rounds", len(rates))
	}
	figs := []figure{gps}
	if hot {
		s := summarize(c.waits)
		p99 := sampledFig("p99 wait", s.p99, s.n, lowerBetter)
		mx := sampledFig("max wait", s.max, s.n, lowerBetter)
		if c.censored > 0 {
			mx.note = fmt.Sprintf("%d still waiting at the end", c.censored)
		}
		fewest, most := spread(c.grants)
		sp := figure{name: "most/fewest grants", unit: ratio, dir: lowerBetter, note: fmt.Sprintf("%d..%d per contender", fewest, most)}
		if fewest > 0 {
			sp.value = float64(most) / float64(fewest)
		} else {
			sp.value = float64(most)
			sp.unit = count
			sp.note = fmt.Sprintf("a contender got none; most %d", most)
			sp.dir = unranked
		}
		figs = append(figs, sampledFig("median wait", s.median, s.n, lowerBetter), p99, mx, sp)
	}
	figs = append(figs, figure{name: "failed acquisitions", value: float64(c.failures), unit: count, dir: lowerBetter})
	if c.overlaps > 0 || c.unlockErrs > 0 {
		figs = append(figs, figure{name: "OVERLAPPING GRANTS / unlock errors", value: float64(c.overlaps), unit: count,
			note: fmt.Sprintf("%d unlock errors", c.unlockErrs)})
	}
	return &row{scenario: scen, backend: l.backend, lib: l.name, kind: kind, figs: figs}
}

// contend runs n contenders of l for dur, contender i on key(i); more than
// limit holders of a key at once count as overlapping grants.
func contend(ctx context.Context, l lib, addr string, n, limit int, dur time.Duration, key func(int) string) (*contention, error) {
	return contendPhases(ctx, l, addr, n, limit, dur, 1, key)
}

// contendPhases is contend that also counts the grants of each of phases
// equal parts of dur (contention.phases).
func contendPhases(ctx context.Context, l lib, addr string, n, limit int, dur time.Duration, phases int, key func(int) string) (*contention, error) {
	clients := make([]client, n)
	for i := range clients {
		c, err := l.open(ctx, addr)
		if err != nil {
			for _, c := range clients[:i] {
				c.Close()
			}
			return nil, err
		}
		clients[i] = c
	}
	var closeOnce sync.Once
	closeAll := func() {
		closeOnce.Do(func() {
			for _, c := range clients {
				c.Close()
			}
		})
	}
	defer closeAll()

	res := &contention{dur: dur, grants: make([]int, n), phases: make([]int, phases)}
	phaseGrants := make([]atomic.Int64, phases)
	inCS := make(map[string]*atomic.Int32)
	for i := range n {
		if inCS[key(i)] == nil {
			inCS[key(i)] = new(atomic.Int32)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = time.Now()
		end   = start.Add(dur)
	)
	timer := time.AfterFunc(dur, stop)
	defer timer.Stop()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := key(i)
			cs := inCS[k]
			var waits []time.Duration
			grants, failures, censored, unlockErrs := 0, 0, 0, 0
			var overlaps int64
			defer func() {
				mu.Lock()
				res.waits = append(res.waits, waits...)
				res.grants[i] = grants
				res.failures += failures
				res.censored += censored
				res.overlaps += overlaps
				res.unlockErrs += unlockErrs
				mu.Unlock()
			}()
			for {
				want := time.Now()
				if !want.Before(end) {
					return
				}
				var h held
				for {
					lctx, cancel := context.WithTimeout(runCtx, patience)
					got, err := c.Lock(lctx, k)
					cancel()
					if !time.Now().Before(end) || runCtx.Err() != nil {
						waits = append(waits, max(end.Sub(want), 0))
						censored++
						if err == nil {
							got.Unlock(context.Background())
						}
						return
					}
					if err == nil {
						h = got
						break
					}
					failures++
				}
				waits = append(waits, time.Since(want))
				if cs.Add(1) > int32(limit) {
					overlaps++
				}
				grants++
				phaseGrants[min(int(time.Since(start)*time.Duration(phases)/dur), phases-1)].Add(1)
				cs.Add(-1)
				if err := h.Unlock(context.Background()); err != nil {
					unlockErrs++
				}
			}
		}()
	}
	// Contenders blocked in a Lock without a context (zk.Lock) return
	// when their connection closes.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(dur + 3*time.Second):
		closeAll()
		<-done
	}
	for i := range phaseGrants {
		res.phases[i] = int(phaseGrants[i].Load())
	}
	return res, nil
}

// baselineThroughput adds the baseline row of a contention scenario: n
// goroutines, each with its own probe connection, making cycles of two
// round trips for cfg.baseDur.
func baselineThroughput(ctx context.Context, cfg *config, t *table, scen, backend string, n int) error {
	probes := make([]probe, n)
	for i := range probes {
		p, err := openProbe(ctx, backend, cfg.addr[backend])
		if err != nil {
			for _, p := range probes[:i] {
				p.Close()
			}
			return err
		}
		probes[i] = p
	}
	defer func() {
		for _, p := range probes {
			p.Close()
		}
	}()
	var (
		total atomic.Int64
		wg    sync.WaitGroup
		errs  = make([]error, n)
		end   = time.Now().Add(cfg.baseDur)
	)
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if err := p.roundTrip(ctx); err != nil {
					errs[i] = err
					return
				}
				if err := p.roundTrip(ctx); err != nil {
					errs[i] = err
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.add(&row{scenario: scen, backend: backend, lib: fmt.Sprintf("2×%s cycles", probeName[backend]), kind: baselineRow, figs: []figure{
		{name: "grants/s", value: float64(total.Load()) / cfg.baseDur.Seconds(), unit: rate, dir: higherBetter},
	}})
	return nil
}
