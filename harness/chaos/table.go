package chaos

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is the outcome of one scenario run against one driver (or control).
type Row struct {
	Target   string // driver or negative control
	Control  bool   // a known-broken algorithm
	Scenario string
	Report   Report
	// Orphans counts grants and leaks the backend still held at the end
	// (see the residue finders); Leaks is 1 if goroutines leaked.
	Orphans, Leaks int
	// Recovered: a Locker that lived through the fault was granted the key
	// again afterwards.
	Recovered bool
	// Verdict: "pass", "FAIL", "caught" (a control's violation was found),
	// "MISSED" (a control's was not).
	Verdict string
	// Note states what the backend cannot guarantee in this scenario, or
	// what happened worth knowing.
	Note     string
	Duration time.Duration
}

// FormatTable renders rows as the table make chaos prints.
func FormatTable(rows []Row) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "driver\tscenario\tgrants\tfaults\toverlaps (unsafe)\tstale rej/acc\ttoken regr.\tDone<regrant\torphans\tleaks\trecovered\ttime\tverdict\t")
	for _, r := range rows {
		rep := r.Report
		name := r.Target
		if r.Control {
			name = "control/" + name
		}
		done := "-"
		if rep.Lost > 0 {
			done = fmt.Sprintf("%d/%d", rep.DoneBeforeRegrant, rep.Lost)
		}
		rec := "yes"
		if !r.Recovered {
			rec = "NO"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d (%d)\t%d/%d\t%d\t%s\t%d\t%d\t%s\t%.1fs\t%s\t\n",
			name, r.Scenario, rep.Grants, rep.Faults, rep.Overlaps, rep.UnsafeOverlaps,
			rep.StaleRejected, rep.StaleAccepted, rep.TokenRegressions, done, r.Orphans, r.Leaks,
			rec, r.Duration.Seconds(), r.Verdict)
	}
	w.Flush()
	var notes []string
	for _, r := range rows {
		if r.Note != "" {
			name := r.Target
			if r.Control {
				name = "control/" + name
			}
			notes = append(notes, fmt.Sprintf("  %s %s: %s", name, r.Scenario, r.Note))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes:\n" + strings.Join(notes, "\n") + "\n")
	}
	return b.String()
}
