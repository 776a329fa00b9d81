// Command conftable summarizes `go test -json` runs of the drivers'
// conformance suites as a table: driver x provider, with the package
// result and the pass, fail and skip counts of the suite's subtests (the
// leaves of the test tree). `make conformance` uses it.
//
// Record one run, printing each package's result as it finishes:
//
//	go test -json -run TestConformance ./driver/... | conftable -record local.out -provider local
//
// Then print the table of one or more recorded runs:
//
//	conftable local=local.out docker=docker.out
//
// Both exit with status 1 if a package failed (a failed subtest, a build
// error, a panic or a timeout), so the Makefile need not track go test's own
// status through the pipe.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64
	Output     string
}

// pkgResult is what one package's run amounts to.
type pkgResult struct {
	name     string
	result   string // ok, FAIL, no tests, running
	elapsed  time.Duration
	pass     int
	fail     int
	skip     int
	failed   []string            // names of failed leaf tests
	output   map[string][]string // test -> output lines
	pkgOut   []string            // package-level output (build errors, panics)
	tests    map[string]string   // test -> pass/fail/skip
	sawTests bool
}

const modulePrefix = "github.com/dlock-go/dlock/"

func newPkg(name string) *pkgResult {
	return &pkgResult{name: name, result: "running", output: map[string][]string{}, tests: map[string]string{}}
}

// parse reads go test -json from r, calling done for each package that
// finishes, and returns every package's result.
func parse(r io.Reader, copyTo io.Writer, done func(*pkgResult)) (map[string]*pkgResult, error) {
	pkgs := map[string]*pkgResult{}
	get := func(name string) *pkgResult {
		p := pkgs[name]
		if p == nil {
			p = newPkg(name)
			pkgs[name] = p
		}
		return p
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if copyTo != nil {
			copyTo.Write(line)
			copyTo.Write([]byte("\n"))
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// go test reports some errors as plain text (a pattern that
			// matches nothing, a module it cannot load).
			if s := strings.TrimSpace(string(line)); s != "" && !strings.HasPrefix(s, "go: downloading ") {
				p := get("(go test)")
				p.pkgOut = append(p.pkgOut, s)
				p.result = "FAIL"
			}
			continue
		}
		name := e.Package
		if name == "" {
			// "pkg [pkg.test]" while building the test binary.
			name, _, _ = strings.Cut(e.ImportPath, " ")
		}
		if name == "" {
			continue
		}
		p := get(name)
		switch {
		case e.Action == "build-output":
			p.pkgOut = append(p.pkgOut, strings.TrimRight(e.Output, "\n"))
		case e.Action == "build-fail":
			p.result = "FAIL"
		case e.Test == "" && e.Action == "output":
			if s := strings.TrimRight(e.Output, "\n"); s != "" && !strings.HasPrefix(s, "ok ") && s != "PASS" && s != "FAIL" {
				p.pkgOut = append(p.pkgOut, s)
			}
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			p.elapsed = time.Duration(e.Elapsed * float64(time.Second))
			switch {
			case e.Action == "fail":
				p.result = "FAIL"
			case !p.sawTests:
				p.result = "no tests"
			default:
				p.result = "ok"
			}
			p.count()
			if done != nil {
				done(p)
			}
		case e.Test != "" && e.Action == "output":
			p.output[e.Test] = append(p.output[e.Test], strings.TrimRight(e.Output, "\n"))
		case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			p.tests[e.Test] = e.Action
			p.sawTests = true
		}
	}
	for _, p := range pkgs {
		if p.result == "running" { // the stream ended early (killed, timeout)
			p.result = "FAIL"
			p.count()
		}
	}
	return pkgs, sc.Err()
}

// count tallies the leaf tests: those no other test is a subtest of.
func (p *pkgResult) count() {
	p.pass, p.fail, p.skip, p.failed = 0, 0, 0, nil
	parents := map[string]bool{}
	names := make([]string, 0, len(p.tests))
	for n := range p.tests {
		names = append(names, n)
		for i := range len(n) {
			if n[i] == '/' {
				parents[n[:i]] = true
			}
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if parents[n] {
			continue
		}
		switch p.tests[n] {
		case "pass":
			p.pass++
		case "fail":
			p.fail++
			p.failed = append(p.failed, n)
		case "skip":
			p.skip++
		}
	}
}

// short is the package path in the table: driver/redisnx becomes redisnx.
func short(pkg string) string {
	return strings.TrimPrefix(strings.TrimPrefix(pkg, modulePrefix), "driver/")
}

func record(path, provider string) int {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conftable:", err)
		return 2
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()
	pkgs, err := parse(os.Stdin, w, func(p *pkgResult) {
		fmt.Printf("  %-7s %-8s %-22s %3d subtests: %3d pass, %d fail, %d skip  %6.1fs\n",
			provider, p.result, short(p.name), p.pass+p.fail+p.skip, p.pass, p.fail, p.skip, p.elapsed.Seconds())
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "conftable:", err)
		return 2
	}
	for _, p := range pkgs {
		if p.result == "FAIL" {
			return 1
		}
	}
	return 0
}

func table(runs []string) int {
	type row struct {
		provider string
		p        *pkgResult
	}
	var rows []row
	status := 0
	for _, run := range runs {
		provider, path, ok := strings.Cut(run, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "conftable: want provider=file, got %q\n", run)
			return 2
		}
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conftable:", err)
			return 2
		}
		pkgs, err := parse(f, nil, nil)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "conftable:", err)
			return 2
		}
		for _, p := range pkgs {
			rows = append(rows, row{provider, p})
		}
	}
	order := map[string]int{}
	for i, run := range runs {
		provider, _, _ := strings.Cut(run, "=")
		order[provider] = i
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if a, b := short(rows[i].p.name), short(rows[j].p.name); a != b {
			return a < b
		}
		return order[rows[i].provider] < order[rows[j].provider]
	})

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "driver\tprovider\tresult\tsubtests\tpass\tfail\tskip\ttime\t")
	fmt.Fprintln(tw, "------\t--------\t------\t--------\t----\t----\t----\t----\t")
	var none []string
	for _, r := range rows {
		p := r.p
		if p.result == "no tests" {
			none = append(none, short(p.name)+" ("+r.provider+")")
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.1fs\t\n",
			short(p.name), r.provider, p.result, p.pass+p.fail+p.skip, p.pass, p.fail, p.skip, p.elapsed.Seconds())
	}
	tw.Flush()
	if len(none) > 0 {
		fmt.Printf("no conformance tests: %s\n", strings.Join(none, ", "))
	}

	for _, r := range rows {
		p := r.p
		if p.result != "FAIL" {
			continue
		}
		status = 1
		fmt.Printf("\n%s on %s: FAIL\n", short(p.name), r.provider)
		for _, t := range p.failed {
			fmt.Printf("  --- FAIL: %s\n", t)
			for _, l := range tail(p.output[t], 15) {
				fmt.Printf("      %s\n", l)
			}
		}
		if len(p.failed) == 0 || len(p.pkgOut) > 0 {
			for _, l := range tail(p.pkgOut, 30) {
				fmt.Printf("  %s\n", l)
			}
		}
	}
	return status
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

func main() {
	recordTo := flag.String("record", "", "read go test -json from stdin, save it to `file` and print each package's result")
	provider := flag.String("provider", "", "provider name for -record's progress lines")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go test -json ... | conftable -record file -provider name\n       conftable provider=file ...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *recordTo != "" {
		os.Exit(record(*recordTo, *provider))
	}
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(table(flag.Args()))
}
