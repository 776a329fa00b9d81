package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// quantile returns the q-quantile (0 <= q <= 1) of ds by the nearest-rank
// method: the smallest sample that at least q of the samples do not
// exceed. It sorts ds. Zero for no samples.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// summary is the median, p99 and maximum of a set of durations.
type summary struct {
	n                int
	median, p99, max time.Duration
}

func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	return summary{n: len(ds), median: quantile(ds, 0.5), p99: quantile(ds, 0.99), max: quantile(ds, 1)}
}

// spread returns the fewest and the most of counts.
func spread(counts []int) (fewest, most int) {
	if len(counts) == 0 {
		return 0, 0
	}
	return slices.Min(counts), slices.Max(counts)
}

// errgroup runs functions concurrently and returns the first error.
type errgroup struct {
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (g *errgroup) Go(f func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.once.Do(func() { g.err = err })
		}
	}()
}

func (g *errgroup) Wait() error {
	g.wg.Wait()
	return g.err
}
