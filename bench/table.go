package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// direction says which way a figure is better, for the best peer.
type direction int

const (
	unranked     direction = 0
	lowerBetter  direction = -1
	higherBetter direction = 1
)

// unit says how a figure's value prints.
type unit int

const (
	count    unit = iota // a plain number
	duration             // nanoseconds
	rate                 // per second
	byteSize             // bytes
	ratio                // a factor
)

// A figure is one measured number.
type figure struct {
	name  string
	value float64
	unit  unit
	dir   direction
	na    string // set when the figure does not apply: why
	note  string // printed after the value (sample size, censoring, ...)
}

func durFig(name string, d time.Duration, dir direction) figure {
	return figure{name: name, value: float64(d), unit: duration, dir: dir}
}

// noSamples is the na of a figure drawn from no samples.
const noSamples = "not measured: no samples"

// sampledFig is durFig for a figure drawn from n samples: with none, the
// figure is not measured (its na says so), never a zero that a target
// would read as met or a ratio would divide by.
func sampledFig(name string, d time.Duration, n int, dir direction) figure {
	f := durFig(name, d, dir)
	if n == 0 {
		f.na = noSamples
	}
	return f
}

// rowKind tells baselines, dlock and peers apart.
type rowKind int

const (
	dlockRow rowKind = iota
	peerRow
	baselineRow
	// plainRow is a plain lock of the backend's own (PostgreSQL's
	// advisory lock): a baseline of its own, printed as one, but with its
	// ratios to the round-trip baseline and to the peers like a library's.
	plainRow
)

// A row is one library (or baseline) in one scenario.
type row struct {
	scenario string
	backend  string
	lib      string
	kind     rowKind
	figs     []figure
}

func (r *row) fig(name string) (figure, bool) {
	for _, f := range r.figs {
		if f.name == name {
			return f, true
		}
	}
	return figure{}, false
}

// A table collects rows from every scenario, in order.
type table struct {
	mu   sync.Mutex
	rows []*row
}

func (t *table) add(r *row) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, r)
}

// find returns the row of lib in scenario, or nil.
func (t *table) find(scenario, lib string) *row {
	for _, r := range t.rows {
		if r.scenario == scenario && r.lib == lib {
			return r
		}
	}
	return nil
}

// value returns a figure's value, and whether it was measured.
func (t *table) value(scenario, lib, fig string) (float64, bool) {
	r := t.find(scenario, lib)
	if r == nil {
		return 0, false
	}
	f, ok := r.fig(fig)
	return f.value, ok && f.na == ""
}

// baseline returns the value of figure name in the baseline row of the
// scenario and backend.
func (t *table) baseline(scenario, backend, name string) (float64, bool) {
	for _, r := range t.rows {
		if r.scenario == scenario && r.backend == backend && r.kind == baselineRow {
			if f, ok := r.fig(name); ok && f.na == "" {
				return f.value, true
			}
		}
	}
	return 0, false
}

// bestPeer returns the best value of figure name among the peers of the
// scenario and backend, and the peer's name.
func (t *table) bestPeer(scenario, backend, name string, dir direction) (float64, string, bool) {
	var (
		best  float64
		who   string
		found bool
	)
	for _, r := range t.rows {
		if r.scenario != scenario || r.backend != backend || r.kind != peerRow {
			continue
		}
		f, ok := r.fig(name)
		if !ok || f.na != "" {
			continue
		}
		if !found || (dir == lowerBetter && f.value < best) || (dir == higherBetter && f.value > best) {
			best, who, found = f.value, r.lib, true
		}
	}
	return best, who, found
}

// ratioText prints a/b, or "-" when it has no meaning.
func ratioText(a, b float64) string {
	switch {
	case b == 0 && a == 0:
		return "="
	case b == 0 || math.IsInf(a, 0) || math.IsNaN(a):
		return "-"
	}
	r := a / b
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	case r >= 10:
		return fmt.Sprintf("%.1f", r)
	default:
		return fmt.Sprintf("%.2f", r)
	}
}

// format prints v in u with three significant digits.
func format(v float64, u unit) string {
	switch u {
	case duration:
		d := time.Duration(v)
		switch {
		case d >= time.Second:
			return sig3(d.Seconds()) + "s"
		case d >= time.Millisecond:
			return sig3(v/1e6) + "ms"
		default:
			return sig3(v/1e3) + "µs"
		}
	case rate:
		return sig3(v) + "/s"
	case byteSize:
		return sig3(v) + " B"
	case ratio:
		return sig3(v) + "x"
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return sig3(v)
}

func sig3(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100 || a == 0:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// write prints the table: one line per scenario, backend, library and
// figure, with the ratios to the scenario's baseline (same backend) and
// to the best peer (same backend) where they mean something.
func (t *table) write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tbackend\tlibrary\tfigure\tvalue\tx baseline\tx best peer\t")
	prev := ""
	for _, r := range t.rows {
		if k := r.scenario + "\x00" + r.backend; k != prev && prev != "" {
			fmt.Fprintln(tw, "\t\t\t\t\t\t\t")
		}
		prev = r.scenario + "\x00" + r.backend
		lib := r.lib
		if r.kind == baselineRow || r.kind == plainRow {
			lib += " [baseline]"
		}
		for _, f := range r.figs {
			val, xb, xp := f.na, "", ""
			if f.na == "" {
				val = format(f.value, f.unit)
				if f.note != "" {
					val += " (" + f.note + ")"
				}
				if f.dir != unranked && r.kind != baselineRow {
					if b, ok := t.baseline(r.scenario, r.backend, f.name); ok {
						xb = ratioText(f.value, b)
					}
					if p, who, ok := t.bestPeer(r.scenario, r.backend, f.name, f.dir); ok {
						xp = ratioText(f.value, p)
						if who == r.lib {
							xp += " (best)"
						}
					}
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.scenario, r.backend, lib, f.name, val, xb, xp)
		}
	}
	tw.Flush()
}

// A target is one of the goals, checked against the table.
type target struct {
	name     string
	measured string
	met      bool
	missing  bool // not measured in this run
}

func writeTargets(w io.Writer, ts []target) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmeasured\tverdict\t")
	for _, t := range ts {
		v := "MISSED"
		switch {
		case t.missing:
			v = "not measured"
		case t.met:
			v = "met"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", t.name, strings.ReplaceAll(t.measured, "\t", " "), v)
	}
	tw.Flush()
}
