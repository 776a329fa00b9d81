//go:build demo

package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// backendStats aggregates the events of one backend's workers.
type backendStats struct {
	name, url string

	mu        sync.Mutex
	grants    int
	overlaps  int
	stale     int
	lost      int
	errors    int
	lastError string
	waits     []time.Duration
	elapsed   time.Duration // the contention window, once over
	failures  []string      // worker processes that failed, resources left inside
}

func (s *backendStats) add(ev workerEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Token == 0 && ev.Err != "" { // a failed attempt
		s.errors++
		s.lastError = ev.Err
		return
	}
	s.grants++
	s.waits = append(s.waits, time.Duration(ev.WaitNS))
	if ev.Overlap {
		s.overlaps++
	}
	if ev.Stale {
		s.stale++
	}
	if ev.Lost {
		s.lost++
	}
	if ev.Err != "" {
		s.errors++
		s.lastError = ev.Err
	}
}

func (s *backendStats) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, fmt.Sprintf(format, args...))
}

// ok reports whether the backend passed: grants were made, none
// overlapped, tokens only increased, nothing failed.
func (s *backendStats) ok() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants > 0 && s.overlaps == 0 && s.stale == 0 && s.lost == 0 && s.errors == 0 && len(s.failures) == 0
}

// progress is the one-line live view.
func (s *backendStats) progress(elapsed, total time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(s.grants) / elapsed.Seconds()
	}
	line := fmt.Sprintf("%-11s %4s/%s  grants %6d (%5.0f/s)  overlaps %d  stale tokens %d",
		s.name, seconds(min(elapsed, total)), seconds(total), s.grants, rate, s.overlaps, s.stale)
	if s.errors > 0 {
		line += fmt.Sprintf("  errors %d", s.errors)
	}
	return line
}

// percentile returns the p-th percentile (nearest rank) of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// writeTable prints one row per backend.
func writeTable(w io.Writer, all []*backendStats) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tgrants\tgrants/s\toverlaps\tfencing tokens\twait p50\twait p99\tlost\terrors")
	for _, s := range all {
		s.mu.Lock()
		waits := slices.Clone(s.waits)
		slices.Sort(waits)
		rate := 0.0
		if s.elapsed > 0 {
			rate = float64(s.grants) / s.elapsed.Seconds()
		}
		tokens := "monotonic"
		if s.stale > 0 {
			tokens = fmt.Sprintf("%d STALE", s.stale)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%s\t%s\t%s\t%d\t%d\n", s.name, s.grants, rate, s.overlaps, tokens,
			fmtDur(percentile(waits, 50)), fmtDur(percentile(waits, 99)), s.lost, s.errors)
		s.mu.Unlock()
	}
	tw.Flush()
}

// fmtDur prints a wait with three significant digits at most.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

// why says what made ok false.
func (s *backendStats) why() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r []string
	if s.grants == 0 {
		r = append(r, "no grants")
	}
	if s.overlaps > 0 {
		r = append(r, fmt.Sprintf("%d overlapping grants", s.overlaps))
	}
	if s.stale > 0 {
		r = append(r, fmt.Sprintf("%d stale fencing tokens", s.stale))
	}
	if s.lost > 0 {
		r = append(r, fmt.Sprintf("%d leases lost", s.lost))
	}
	if s.errors > 0 {
		r = append(r, fmt.Sprintf("%d errors, the last: %s", s.errors, s.lastError))
	}
	r = append(r, s.failures...)
	return strings.Join(r, "; ")
}
