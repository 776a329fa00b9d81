// Package leakcheck finds the goroutines a test left running, with the
// standard library only: the tests of dlock's main module may not import
// a leak checker from another module, or every user's go.sum would list it
// (docs/decisions/0036-three-modules.md).
//
// Take a Snapshot before the code under test starts, and Check after it
// should have stopped everything it started:
//
//	base := leakcheck.Take()
//	... use and Close a Locker ...
//	leakcheck.Verify(t, base)
//
// A goroutine leaks if it is alive at Check, was not alive at the
// Snapshot, is not the caller, was not started by a goroutine alive at
// the Snapshot other than the caller, and is not one of these, which
// outlive any test by design: the testing package's own (a test or
// subtest blocked on a channel), os/signal's and the runtime's signal
// goroutines, and the test harness's (any goroutine with a frame in, or
// created by, package internal/testsupport/testserver: its servers and their hooks).
// Ignore adds others. A goroutine started by one alive at the Snapshot
// belongs to what was there before the code under test: a harness's
// client that reconnects meanwhile (go-zookeeper starts a reader and a
// writer for each connection, from its loop) starts new goroutines that
// live as long as it does. Goroutines take a moment to exit after Close
// returns, so Check retries for up to two seconds before it reports, not
// counting the time a starved machine held it back (a sleep that came
// back late extends the wait by its lateness), for up to 30 s in all.
package leakcheck

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Snapshot is the set of goroutines alive at one moment, by id.
type Snapshot map[uint64]bool

// Take returns the goroutines alive now.
func Take() Snapshot {
	s := Snapshot{}
	for _, g := range stacks() {
		s[g.id] = true
	}
	return s
}

// Option changes what Check ignores.
type Option func(*config)

type config struct{ ignore []string }

// Ignore makes Check ignore the goroutines that have fn (a full function
// name as stack traces print it, e.g. "example.com/p.(*T).run.func1") in
// any frame or as their creator.
func Ignore(fn string) Option {
	return func(c *config) { c.ignore = append(c.ignore, fn) }
}

// harness is the prefix of the test harness's functions; its goroutines
// (server processes' waiters, restarts, the container helper's client) live
// as long as the servers they watch, not as the code under test.
const harness = "github.com/dlock-go/dlock/internal/testsupport/testserver."

// maxWait bounds Check's wait, however starved the machine.
const maxWait = 30 * time.Second

// sleep is time.Sleep; a test makes it come back late, as on a starved
// machine.
var sleep = time.Sleep

// Check returns an error listing the goroutines that leaked since base, or
// nil. It retries for up to two seconds while any is left, plus the time
// its sleeps came back late (see the package doc).
func Check(base Snapshot, opts ...Option) error {
	var c config
	for _, o := range opts {
		o(&c)
	}
	self := currentID()
	start := time.Now()
	deadline := start.Add(2 * time.Second)
	wait := time.Millisecond
	for {
		var leaked []goroutine
		for _, g := range stacks() {
			if g.id == self || base[g.id] || startedByBase(g, base, self) || c.ignored(g) {
				continue
			}
			leaked = append(leaked, g)
		}
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "%d goroutine(s) leaked:", len(leaked))
			for _, g := range leaked {
				b.WriteString("\n\n")
				b.WriteString(g.text)
			}
			return fmt.Errorf("%s", b.String())
		}
		slept := time.Now()
		sleep(wait)
		if late := time.Since(slept) - wait; late > 0 && deadline.Before(start.Add(maxWait)) {
			deadline = deadline.Add(late)
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Verify fails t (without stopping it) if Check finds a leak.
func Verify(t testing.TB, base Snapshot, opts ...Option) {
	t.Helper()
	if err := Check(base, opts...); err != nil {
		t.Error(err)
	}
}

// startedByBase reports whether g was started by a goroutine of base
// other than self. A time.AfterFunc's goroutine is not: its parent is
// whichever goroutine was running when the timer fired.
func startedByBase(g goroutine, base Snapshot, self uint64) bool {
	return base[g.createdIn] && g.createdIn != self && g.creator != "time.goFunc"
}

type goroutine struct {
	id        uint64
	state     string   // "chan receive", "select, 2 minutes", ...
	funcs     []string // each frame's function, innermost first
	creator   string   // the function of the "created by" line
	createdIn uint64   // the id of the goroutine that started it; 0 if not shown
	text      string
}

func (c *config) ignored(g goroutine) bool {
	if strings.HasPrefix(g.creator, harness) || slices.Contains(c.ignore, g.creator) {
		return true
	}
	for _, f := range g.funcs {
		if strings.HasPrefix(f, harness) || slices.Contains(c.ignore, f) || f == "runtime.ensureSigM" {
			return true
		}
	}
	if len(g.funcs) == 0 {
		return false
	}
	switch g.funcs[0] {
	case "os/signal.signal_recv", "os/signal.loop":
		return true
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runTests", "testing.tRunner":
		// A test or subtest waiting for others: the testing package's.
		return !strings.HasPrefix(g.state, "running")
	}
	return false
}

// stacks returns every goroutine's stack, parsed.
func stacks() []goroutine {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		if g, ok := parse(string(block)); ok {
			gs = append(gs, g)
		}
	}
	return gs
}

// parse reads one goroutine's block of runtime.Stack's output:
//
//	goroutine 7 [chan receive, 1 minutes]:
//	example.com/p.(*T).wait(0xc000010000)
//		/src/p/t.go:12 +0x2a
//	created by example.com/p.Start in goroutine 1
//		/src/p/t.go:5 +0x3c
func parse(block string) (goroutine, bool) {
	lines := strings.Split(strings.TrimSpace(block), "\n")
	head, ok := strings.CutPrefix(lines[0], "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	idText, rest, ok := strings.Cut(head, " ")
	if !ok {
		return goroutine{}, false
	}
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return goroutine{}, false
	}
	g := goroutine{id: id, text: strings.TrimSpace(block)}
	if i, j := strings.IndexByte(rest, '['), strings.LastIndexByte(rest, ']'); i >= 0 && j > i {
		g.state = rest[i+1 : j]
	}
	for _, l := range lines[1:] {
		if l == "" || l[0] == '\t' {
			continue
		}
		if c, ok := strings.CutPrefix(l, "created by "); ok {
			if i := strings.Index(c, " in goroutine "); i >= 0 {
				g.createdIn, _ = strconv.ParseUint(c[i+len(" in goroutine "):], 10, 64)
				c = c[:i]
			}
			g.creator = c
			continue
		}
		if i := strings.LastIndexByte(l, '('); i > 0 {
			l = l[:i]
		}
		g.funcs = append(g.funcs, l)
	}
	return g, true
}

// currentID returns the calling goroutine's id.
func currentID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	g, _ := parse(string(buf))
	return g.id
}
