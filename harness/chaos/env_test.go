package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/lock"
)

// envMode selects the long version: DLOCK_CHAOS=full (make chaos). The
// default, for go test and make test, is the short one.
const envMode = "DLOCK_CHAOS"

func fullMode() bool { return os.Getenv(envMode) == "full" }

// A scenario is one fault, injected for real, with a fixed choreography.
type scenario struct {
	name     string
	backends []Backend // where it applies; nil: everywhere
	server   ServerOptions
	short    bool // part of the short run
	run      func(e *env)
}

func (s *scenario) appliesTo(b Backend) bool {
	if len(s.backends) == 0 {
		return true
	}
	for _, x := range s.backends {
		if x == b {
			return true
		}
	}
	return false
}

// env is one scenario run: the target, its server, the fenced resource,
// the holders, and what the run found.
type env struct {
	t   *testing.T
	tg  *target
	sc  *scenario
	srv *Server
	res *Resource
	ps  *parentSink
	key string
	// ttl is the lease TTL; bound how long a grant outlives a silent holder.
	ttl, bound time.Duration

	holders     []holder
	children    []*childHolder
	proxies     []*Proxy
	recoverWith holder // the holder that must be granted the key again at the end

	// exclusion: the backend keeps its guarantees in this scenario, so
	// unsafe overlaps and late Done are failures. Cleared (with a note)
	// where the backend loses its state.
	exclusion bool
	// orphanWait: a killed holder's grant may live until then.
	orphanWait time.Time
	// orphans found during the run (a lost grant not cleaned up).
	orphans []string
	notes   []string
	// problems: expectations of the choreography that did not hold. They
	// fail a driver's run; for a control they are notes.
	problems []string
}

var keySeq atomic.Int64

func newEnv(t *testing.T, tg *target, sc *scenario, srv *Server) *env {
	return &env{
		t: t, tg: tg, sc: sc, srv: srv, res: NewResource(), ttl: tg.ttl, bound: tg.bound, exclusion: true,
		key: fmt.Sprintf("chaos/%s/%s/%d", tg.name, sc.name, keySeq.Add(1)),
	}
}

func (e *env) logf(format string, args ...any) {
	e.t.Helper()
	e.t.Logf("%v "+format, append([]any{e.res.Now()}, args...)...)
}

// note records something worth knowing in the results.
func (e *env) note(format string, args ...any) {
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

// expect records a problem unless ok.
func (e *env) expect(ok bool, format string, args ...any) bool {
	e.t.Helper()
	if !ok {
		msg := fmt.Sprintf(format, args...)
		e.problems = append(e.problems, msg)
		e.logf("expectation failed: %s", msg)
	}
	return ok
}

// stateLost states that the backend loses its state in this scenario, so
// exclusion is not expected; fencing still is.
func (e *env) stateLost(why string) {
	e.exclusion = false
	e.note("%s: exclusion is not guaranteed; fencing must hold", why)
}

// inproc makes a holder in this process with its own client to addrs.
func (e *env) inproc(name string, addrs []string) holder {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.tg.open(ctx, addrs, e.ttl, Hooks{})
	if err != nil {
		e.t.Fatalf("open %s for %s: %v", e.tg.name, name, err)
	}
	h := inproc{&worker{name: name, locker: l, sink: localSink{e.res}}}
	e.holders = append(e.holders, h)
	return h
}

// child makes a holder in a child process with its own client to addrs.
func (e *env) child(name string, addrs []string) *childHolder {
	e.t.Helper()
	if e.ps == nil {
		ps, err := newParentSink(e.res)
		if err != nil {
			e.t.Fatal(err)
		}
		e.ps = ps
	}
	c, err := startChild(e.ps, name, e.tg, addrs, e.ttl)
	if err != nil {
		e.t.Fatalf("holder process %s: %v", name, err)
	}
	e.children = append(e.children, c)
	e.holders = append(e.holders, c)
	return c
}

// proxy starts a fault-injecting proxy to the i-th server.
func (e *env) proxy(i int) *Proxy {
	e.t.Helper()
	p, err := NewProxy(e.srv.Addrs[i], e.tg.backend.Protocol())
	if err != nil {
		e.t.Fatal(err)
	}
	e.proxies = append(e.proxies, p)
	return p
}

// lock asks h for the key; it records nothing beyond what the worker does.
func (e *env) lock(h holder, a LockArgs) (grant, error) {
	a.Key = e.key
	if a.Timeout == 0 {
		a.Timeout = 10 * time.Second
	}
	start := e.res.Now()
	g, err := h.Lock(a)
	if g.Fails > 0 {
		e.note("%s: Lock failed %d time(s) with a backend error and was called again", h.Name(), g.Fails)
	}
	if g.DOA > 0 {
		e.note("%s: Lock returned %d lease(s) already past their local deadline (the request waited out the fault); locked again", h.Name(), g.DOA)
	}
	if err != nil {
		e.logf("%s: lock failed after %v: %s", h.Name(), e.res.Now()-start, desc(err))
	} else {
		e.logf("%s: granted lease %d, token %d, after %v", h.Name(), g.ID, g.Token, e.res.Now()-start)
	}
	return g, err
}

// mustLock locks or records a problem.
func (e *env) mustLock(h holder, a LockArgs) (grant, bool) {
	g, err := e.lock(h, a)
	return g, e.expect(err == nil, "%s: Lock: %s", h.Name(), desc(err))
}

// lockAsync locks in the background.
func (e *env) lockAsync(h holder, a LockArgs) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		g, err := e.lock(h, a)
		ch <- lockResult{g, err}
	}()
	return ch
}

type lockResult struct {
	g   grant
	err error
}

// waitAccepted waits until n writes of lease id were accepted.
func (e *env) waitAccepted(id LeaseID, n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if e.res.AcceptedWrites(id) >= n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// expectWrites expects n writes of the lease g (of h) accepted soon; a
// lease lost before that (Lock can return one already past its deadline)
// is noted, not failed.
func (e *env) expectWrites(g grant, h holder, n int) {
	e.t.Helper()
	if e.waitAccepted(g.ID, n, 2*time.Second) {
		return
	}
	if l, ok := e.res.Lease(g.ID); ok && l.DoneAt != Never {
		e.note("%s's lease %d ended (%s) before %d writes", h.Name(), g.ID, l.Err, n)
		return
	}
	e.expect(false, "%s's lease %d: %d writes accepted within 2s", h.Name(), g.ID, n)
}

// fault records a fault around f (one that lasts while f runs).
func (e *env) fault(kind, target string) (end func()) {
	e.logf("fault: %s %s", kind, target)
	return e.res.FaultStart(kind, target)
}

func (e *env) must(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// finish ends the run: every holder lets go (except the recovering one,
// which must then be granted the key again), children exit, proxies close,
// and the backend is searched for residue.
func (e *env) finish() (recovered bool, orphans []string) {
	for _, h := range e.holders {
		if h != e.recoverWith {
			if err := h.Close(); err != nil && !errors.Is(err, lock.ErrClosed) {
				e.logf("%s: close: %s", h.Name(), desc(err))
			}
		}
	}
	recovered = e.recover()
	if e.recoverWith != nil {
		e.recoverWith.Close()
	}
	for _, c := range e.children {
		c.shutdown()
	}
	for _, p := range e.proxies {
		if errs := p.ParseErrors(); len(errs) > 0 {
			e.expect(false, "proxy could not parse the traffic: %v", errs)
		}
		p.Close()
	}
	if e.ps != nil {
		e.ps.close()
	}
	orphans = append(orphans, e.orphans...)
	return recovered, append(orphans, e.residue()...)
}

// recover checks that the key can be granted again after the fault, to the
// holder that lived through it (or a fresh one), and that its write is
// accepted.
func (e *env) recover() bool {
	h := e.recoverWith
	if h == nil {
		h = e.inproc("R", e.srv.Addrs)
		e.recoverWith = h
	}
	g, err := e.lock(h, LockArgs{Timeout: e.bound + 3*time.Second})
	if err != nil {
		e.note("not granted again: %s", desc(err))
		return false
	}
	ok := e.waitAccepted(g.ID, 1, 2*time.Second)
	if !ok {
		e.note("granted again but its write was refused (token %d)", g.Token)
	}
	if err := h.Unlock(5 * time.Second); err != nil {
		e.note("unlock after recovery: %s", desc(err))
		return false
	}
	return ok
}

// residue searches the backend for grants and leaks. A killed holder's
// grant may live until orphanWait; past that it is residue.
func (e *env) residue() []string {
	deadline := time.Now().Add(500 * time.Millisecond)
	if e.orphanWait.After(deadline) {
		deadline = e.orphanWait
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		found, err := e.srv.Residue(ctx)
		cancel()
		if err != nil {
			e.expect(false, "searching the backend for residue: %v", err)
			return nil
		}
		if len(found) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run runs sc against tg and records its row.
func run(t *testing.T, tg *target, sc *scenario) {
	start := time.Now()
	srv := StartServer(t, tg.backend, sc.server)
	// Servers restarted by the scenario and the thread that starts holder
	// processes are internal/testsupport/testserver's, which leakcheck ignores.
	base := leakcheck.Take()
	e := newEnv(t, tg, sc, srv)
	sc.run(e)
	recovered, orphans := e.finish()
	leaks := 0
	if err := leakcheck.Check(base); err != nil {
		leaks = 1
		e.expect(false, "goroutines leaked: %v", err)
	}
	rep := Check(e.res.History())
	row := Row{
		Target: tg.name, Control: tg.control, Scenario: sc.name, Report: rep,
		Orphans: len(orphans), Leaks: leaks, Recovered: recovered, Duration: time.Since(start),
	}
	for _, l := range e.res.History().Leases {
		t.Logf("lease %d: %s token %d granted %v, unlock %v, done %v (%s), killed %v; unlock: %s",
			l.ID, l.Holder, l.Token, l.Granted, l.UnlockAt, l.DoneAt, l.Err, l.KilledAt, l.UnlockErr)
	}
	for _, v := range rep.Violations {
		t.Logf("checker: %s", v)
	}
	for _, o := range orphans {
		t.Logf("residue: %s", o)
	}
	if tg.control {
		row.Verdict = controlVerdict(t, tg, sc, row, e)
	} else {
		row.Verdict = driverVerdict(t, row, e)
	}
	row.Note = strings.Join(e.notes, "; ")
	record(row)
}

// driverVerdict applies the pass criteria to a driver's run.
func driverVerdict(t *testing.T, row Row, e *env) string {
	t.Helper()
	fails := driverFailures(row, e.exclusion, e.problems)
	for _, f := range fails {
		t.Error(f)
	}
	if len(fails) > 0 {
		return "FAIL"
	}
	return "pass"
}

// driverFailures lists what fails a driver's run: stale writes accepted,
// token regressions, orphans, leaks, no grant after the fault and the
// choreography's problems always; unsafe overlaps and Done closed after
// the next grant where the backend keeps exclusion in the scenario.
func driverFailures(row Row, exclusion bool, problems []string) []string {
	rep := row.Report
	var fails []string
	if rep.StaleAccepted > 0 {
		fails = append(fails, fmt.Sprintf("%d stale writes accepted", rep.StaleAccepted))
	}
	if rep.TokenRegressions > 0 {
		fails = append(fails, fmt.Sprintf("%d token regressions", rep.TokenRegressions))
	}
	if exclusion && rep.UnsafeOverlaps > 0 {
		fails = append(fails, fmt.Sprintf("%d unsafe overlaps", rep.UnsafeOverlaps))
	}
	if exclusion && rep.DoneBeforeRegrant < rep.Lost {
		fails = append(fails, fmt.Sprintf("Done closed before the next grant for %d of %d lost leases", rep.DoneBeforeRegrant, rep.Lost))
	}
	if row.Orphans > 0 {
		fails = append(fails, fmt.Sprintf("%d orphans", row.Orphans))
	}
	if row.Leaks > 0 {
		fails = append(fails, "goroutine leak")
	}
	if !row.Recovered {
		fails = append(fails, "not granted again after the fault")
	}
	return append(fails, problems...)
}

// controlVerdict checks that a control is caught where it must be, and
// says which checks fired elsewhere.
func controlVerdict(t *testing.T, tg *target, sc *scenario, row Row, e *env) string {
	t.Helper()
	for _, p := range e.problems {
		t.Logf("(control) %s", p)
	}
	var fired []string
	rep := row.Report
	if rep.UnsafeOverlaps > 0 {
		fired = append(fired, "overlap")
	}
	if rep.StaleAccepted > 0 {
		fired = append(fired, "stale")
	}
	if rep.DoneBeforeRegrant < rep.Lost {
		fired = append(fired, "late Done")
	}
	if row.Orphans > 0 {
		fired = append(fired, "orphan")
	}
	if !row.Recovered {
		fired = append(fired, "no regrant")
	}
	if catch := tg.catches[sc.name]; catch != nil {
		if err := catch(row); err != nil {
			t.Errorf("control %s not caught in %s: %v", tg.name, sc.name, err)
			return "MISSED"
		}
	}
	if len(fired) == 0 {
		return "-"
	}
	return "caught: " + strings.Join(fired, ", ")
}
