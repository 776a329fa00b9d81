package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/rpc"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// Config is one run: a target, a seed, a duration, and the load's shape.
type Config struct {
	Target   *Target
	Seed     uint64
	Duration time.Duration
	Lockers  int // Lockers in the test process, each on its own proxy (default 3)
	Workers  int // goroutines per Locker (default 8)
	Children int // child processes, one Locker each (default 1; none for memory)
	// NoChildren runs no child process.
	NoChildren bool
	Keys       int // hot keys (default 4)
	// NoFaults turns the nemesis off (load only).
	NoFaults bool
	// Faults, if set, are the only kinds of fault injected (a broken
	// variant's run).
	Faults []string
	// Replay is the command that replays the run, printed with violations.
	Replay string
	// Logf prints progress and violations.
	Logf func(format string, args ...any)
	// History, if set, is a file the run's whole history is written to.
	History string
	// Short: the short pass (go test, make test): a target whose check of
	// keys used once waits longer than onceWait skips it.
	Short bool
}

// LivenessBound is how soon a free key must be granted while no fault is
// under way (and none was for the target's Recovery).
const LivenessBound = 3 * time.Second

// Summary is what a run found.
type Summary struct {
	Driver     string
	Seed       uint64
	Duration   time.Duration
	Stats      Stats
	Violations []Violation
	Excused    map[string]int
	// Problems are failures of the harness itself (a server that would
	// not restart, a proxy that could not parse the traffic).
	Problems []string
	// DuringUnlock counts grants made while another lease of the key was
	// being unlocked (see Recorder.GrantedDuringUnlock).
	DuringUnlock int
	// SharedLeases and Permits: the run's Lockers supported them
	// (Locker.Supports; see Unexercised).
	SharedLeases, Permits bool
	// OneStepSets: the run's driver takes sets in one step
	// (driver.SetAcquirer; see oneStepSets and Unexercised).
	OneStepSets bool
	// Adversary counts what the pub/sub adversary heard and sent, by kind
	// (see adversary.go); nil without one.
	Adversary map[string]int
	// FaultsLimited: the run injected only some kinds of fault
	// (Config.Faults) or none, so the adversary may not have run.
	FaultsLimited bool
	// Planned is Config.Duration; FaultKinds are the kinds of fault the
	// nemesis could pick for the run, and Injected how many of each it
	// started (see Unexercised and Target.AllFaults).
	Planned    time.Duration
	FaultKinds []string
	Injected   map[string]int
	// AllInjectedBy is how long into the run every kind of FaultKinds had
	// been injected (0: some never was).
	AllInjectedBy time.Duration
	// Env says what the run's environment was, and when it changed: the
	// database's default isolation level, PgBouncer's restarts, the etcd
	// member frozen, cut off or slowed (see Target.isolation).
	Env []string
	// Once is what the keys used once left on the backend (see
	// onceResidue), or "" where it was not measured.
	Once string
}

// Line is the summary line of a run.
func (s Summary) Line() string {
	return fmt.Sprintf("nemesis: %s seed %d: %d ops, %d faults, %d violations", s.Driver, s.Seed, s.Stats.Ops, s.Stats.Faults, len(s.Violations))
}

// Details says what the figures are made of.
func (s Summary) Details() string {
	st := s.Stats
	var b strings.Builder
	fmt.Fprintf(&b, "  %v; %d grants (%d shared, %d permits, %d dead on arrival, %d while another lease's Unlock was under way), %d refreshes, %d lost replies, %d writes (%d accepted, %d stale refused), %d liveness probes, %d resumes of detached leases (%d took the lease over, %d of them permits), %d re-entries",
		s.Duration.Round(100*time.Millisecond), st.Grants, st.Shared, st.Permits, st.DOA, s.DuringUnlock, st.Refreshes, st.LostReplies, st.Writes, st.Accepted, st.StaleRejected, st.Probes, st.Resumes, st.Resumed, st.ResumedPermits, st.Reentries)
	if st.Permits > 0 {
		fmt.Fprintf(&b, "\n  permits: %d granted, %d of them into a semaphore they filled (limit 2 or 3 per key)", st.Permits, st.PermitsFull)
	}
	if len(st.FaultKinds) > 0 {
		fmt.Fprintf(&b, "\n  faults: %s", tally(st.FaultKinds, " "))
	}
	if len(st.Counts) > 0 {
		fmt.Fprintf(&b, "\n  live resumes, Close races, held replies: %s", tally(st.Counts, " "))
	}
	if len(s.Injected) > 0 {
		fmt.Fprintf(&b, "\n  injected by kind: %s", tally(s.Injected, " "))
		if s.AllInjectedBy > 0 {
			fmt.Fprintf(&b, " (every kind by %v)", s.AllInjectedBy.Round(100*time.Millisecond))
		}
	}
	for _, e := range s.Env {
		fmt.Fprintf(&b, "\n  environment: %s", e)
	}
	if s.Once != "" {
		fmt.Fprintf(&b, "\n  keys used once: %s", s.Once)
	}
	if len(s.Adversary) > 0 {
		fmt.Fprintf(&b, "\n  adversary (pub/sub rights only; etcd: read only): %s", tally(s.Adversary, " "))
	}
	if len(s.Excused) > 0 {
		fmt.Fprintf(&b, "\n  excused: %s", tally(s.Excused, ": "))
	}
	if len(s.Violations) > 0 {
		by := map[string]int{}
		type late struct {
			n    int
			over time.Duration
		}
		lates := map[string]*late{}
		for _, v := range s.Violations {
			by[v.Detector()]++
			if v.Op != "" {
				k := v.Kind + " " + v.Op
				if lates[k] == nil {
					lates[k] = &late{}
				}
				lates[k].n++
				lates[k].over = max(lates[k].over, v.Over)
			}
		}
		fmt.Fprintf(&b, "\n  violations: %s", tally(by, ": "))
		var ks []string
		for k, v := range lates {
			ks = append(ks, fmt.Sprintf("%s %d (up to %v late)", k, v.n, v.over.Round(time.Millisecond)))
		}
		sort.Strings(ks)
		if len(ks) > 0 {
			fmt.Fprintf(&b, "\n  by call: %s", strings.Join(ks, "; "))
		}
	}
	for _, p := range s.Problems {
		fmt.Fprintf(&b, "\n  harness problem: %s", p)
	}
	return b.String()
}

// run is one run's parent side.
type run struct {
	t      testing.TB
	parent *ParentRPC // the children's service (listen)
	cfg    Config
	tg     *Target
	clk    *Clock
	rec    *Recorder
	srv    *chaos.Server
	store  *memory.Store // the memory driver's backend
	env    *procEnv
	logf   func(format string, args ...any)
	wipe   []func() error // per server: empties a killed server's data (nil: it keeps none, or cannot)
	// oneStep: the driver takes sets in one step (driver.SetAcquirer;
	// see oneStepSets).
	oneStep bool

	slots    []*pslot
	children []*childSlot
	rpcSrv   *chaos.RPCServer

	dropMu sync.Mutex
	drops  []*dropArm

	probeLk Locker
	probed  atomic.Int64 // the probes asked for: keys probe/1 to probe/N

	problemsMu sync.Mutex
	problems   []string

	// The environment (Target.isolation, bouncer, members): PgBouncer;
	// the proxies of the prober and the witnesses, one per server; the
	// witnesses made; when the load began; what changed and when.
	bouncer    *testserver.PgBouncer
	envProxies []*chaos.Proxy
	witnesses  atomic.Int64
	begin      time.Time
	notesMu    sync.Mutex
	notes      []string
	once       string
}

// note records a change of the run's environment for its summary.
func (r *run) note(format string, args ...any) {
	r.notesMu.Lock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.notesMu.Unlock()
}

// sinceBegin is the time since the load began, for notes.
func (r *run) sinceBegin() time.Duration {
	if r.begin.IsZero() {
		return 0
	}
	return time.Since(r.begin).Round(100 * time.Millisecond)
}

func (r *run) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.problemsMu.Lock()
	r.problems = append(r.problems, msg)
	r.problemsMu.Unlock()
	r.logf("harness problem: %s", msg)
}

// Run runs the target under load and faults for cfg.Duration, checking
// the lock contract all along, then heals, stops, and checks what must
// hold at the end (every lease ended, every key granted again, nothing
// left on the backend).
func Run(t testing.TB, cfg Config) Summary {
	t.Helper()
	if cfg.Lockers == 0 {
		cfg.Lockers = 3
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.Keys == 0 {
		cfg.Keys = 4
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	tg := cfg.Target
	if cfg.Children == 0 {
		cfg.Children = 1
	}
	if tg.Backend == "" || cfg.NoChildren {
		cfg.Children = 0
	}
	clk := NewClock(monotonic())
	r := &run{t: t, cfg: cfg, tg: tg, clk: clk, logf: cfg.Logf}
	r.rec = NewRecorder(clk, func(format string, args ...any) {
		r.logf("%s seed %d: "+format, append([]any{tg.Name, cfg.Seed}, args...)...)
	}, cfg.Replay)
	r.rec.recovery = tg.Recovery
	r.env = &procEnv{proc: parentProc, clk: clk, sink: r.rec, tg: tg, live: newLiveSet(), stop: make(chan struct{}), owed: &owed{}}
	for i := range cfg.Keys {
		r.env.keys = append(r.env.keys, fmt.Sprintf("hot/%d", i))
	}

	if tg.Backend != "" {
		r.srv = chaos.StartServer(t, tg.Backend, tg.Server)
		r.wipe = r.wipers()
		if tg.prepare != nil {
			if err := tg.prepare(r.srv); err != nil {
				t.Fatalf("%s: prepare the server: %v", tg.Name, err)
			}
		}
		r.startEnv()
	} else {
		r.store = memory.NewStore()
	}
	if err := r.listen(); err != nil {
		t.Fatal(err)
	}
	defer r.closeRPC()
	for i := range cfg.Lockers {
		s := &pslot{r: r, name: fmt.Sprintf("L%d", i+1)}
		if tg.Backend != "" {
			s.proxies = r.proxies()
		}
		if err := s.openNext(30 * time.Second); err != nil {
			t.Fatalf("%s: open %s: %v", tg.Name, s.name, err)
		}
		r.slots = append(r.slots, s)
	}
	defer func() {
		for _, s := range r.slots {
			for _, p := range s.proxies {
				p.Close()
			}
		}
	}()
	for i := range cfg.Children {
		c := &childSlot{r: r, name: fmt.Sprintf("C%d", i+1), proxies: r.proxies(), stream: uint64(1000 * (i + 1))}
		if err := c.spawn(); err != nil {
			t.Fatalf("%s: %v", tg.Name, err)
		}
		r.children = append(r.children, c)
	}
	defer func() {
		for _, c := range r.children {
			c.shutdown()
			for _, p := range c.proxies {
				p.Close()
			}
		}
	}()
	probeAddrs := r.serverAddrs()
	if len(r.envProxies) > 0 {
		probeAddrs = r.clientAddrs(r.envProxies)
	}
	probeLk, err := r.open(probeAddrs, 30*time.Second)
	if err != nil {
		t.Fatalf("%s: open the liveness prober: %v", tg.Name, err)
	}
	r.probeLk = probeLk
	if r.oneStep, err = oneStepSets(probeLk); err != nil {
		r.problem("%v", err)
	}

	r.logf("%s seed %d: %d Lockers x %d goroutines here, %d child process(es) x %d goroutines, keys %v, for %v",
		tg.Name, cfg.Seed, cfg.Lockers, cfg.Workers, cfg.Children, cfg.Workers, r.env.keys, cfg.Duration)
	begin := time.Now()
	r.begin = begin
	bg := make(chan struct{}) // stops the sampler, checker, drop watcher, prober and isolation phases
	var bgWG sync.WaitGroup
	if tg.isolation {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); r.isolationPhases(begin, cfg.Duration, bg) }()
	}
	bgWG.Add(6)
	go func() { defer bgWG.Done(); r.oweLoop(bg) }()
	go func() { defer bgWG.Done(); r.env.live.run(clk, r.rec, 5*time.Millisecond, bg) }()
	go func() { defer bgWG.Done(); canary(parentProc, clk, r.rec, bg) }()
	go func() { defer bgWG.Done(); r.checkLoop(bg) }()
	go func() { defer bgWG.Done(); r.watchDrops(bg) }()
	go func() { defer bgWG.Done(); r.probe(bg) }()

	var wg sync.WaitGroup
	for i, s := range r.slots {
		for j := range cfg.Workers {
			w := newWorker(r.env, s, fmt.Sprintf("%s/w%d", s.name, j+1), cfg.Seed, uint64(100*(i+1)+j))
			wg.Add(1)
			go func() { defer wg.Done(); w.run() }()
		}
	}
	n := &nemesis{r: r, rng: rand.New(rand.NewPCG(cfg.Seed, 7)), stop: make(chan struct{}), injected: map[string]int{}}
	adv := r.startAdversary()
	if !cfg.NoFaults {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.loop(begin.Add(cfg.Duration)) }()
	}
	sleepUntil(begin.Add(cfg.Duration))

	// Heal, then stop.
	close(n.stop)
	n.wg.Wait()
	adv.close()
	r.heal()
	r.awaitProbe(tg.Recovery + LivenessBound + 2*time.Second)
	r.awaitOwed(owedWait)
	r.logf("%s seed %d: faults healed; stopping the load", tg.Name, cfg.Seed)
	close(r.env.stop)
	wg.Wait()
	for _, c := range r.children {
		c.stop()
	}
	for _, s := range r.slots {
		s.closeCurrent()
	}
	r.waitLive(tg.Bound + 3*time.Second)
	close(bg)
	bgWG.Wait()
	probeLk.Close()
	r.rec.Final()
	elapsed := time.Since(begin)

	r.regrant()
	r.residue()
	r.onceResidue()
	for _, p := range r.envProxies {
		p.Close()
	}
	for _, s := range r.slots {
		for _, p := range s.proxies {
			if errs := p.ParseErrors(); len(errs) > 0 {
				r.problem("the proxy of %s could not parse the traffic: %v", s.name, errs)
			}
		}
	}
	if cfg.History != "" {
		if f, err := os.Create(cfg.History); err != nil {
			r.problem("history: %v", err)
		} else {
			if err := r.rec.WriteHistory(f); err != nil {
				r.problem("history: %v", err)
			}
			f.Close()
			r.logf("%s seed %d: history written to %s", tg.Name, cfg.Seed, cfg.History)
		}
	}
	st := r.rec.Stats()
	rw := probeLk.Supports(lock.SharedLeases) == nil
	sem := probeLk.Supports(lock.Permits) == nil
	return Summary{
		Driver: tg.Name, Seed: cfg.Seed, Duration: elapsed, Stats: st,
		Violations: r.rec.Violations(), Excused: r.rec.Excused(), Problems: r.problems,
		DuringUnlock: r.rec.GrantedDuringUnlock(), SharedLeases: rw, Permits: sem, OneStepSets: r.oneStep, Adversary: adv.Counts(),
		FaultsLimited: cfg.NoFaults || len(cfg.Faults) > 0,
		Planned:       cfg.Duration, FaultKinds: n.kindNames(), Injected: n.Injected(), AllInjectedBy: n.AllInjectedBy(),
		Env: r.notes, Once: r.once,
	}
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

func (r *run) serverAddrs() []string {
	if r.srv == nil {
		return nil
	}
	return r.srv.Addrs
}

// clientAddrs are the addresses a Locker over proxies (one per server)
// connects to: the proxies', or for a Redis Cluster "node=proxy", as the
// client learns the nodes' own addresses from the cluster.
func (r *run) clientAddrs(ps []*chaos.Proxy) []string {
	var a []string
	for i, p := range ps {
		if r.tg.cluster {
			a = append(a, r.srv.Addrs[i]+"="+p.Addr())
		} else {
			a = append(a, p.Addr())
		}
	}
	return a
}

// proxies starts one proxy per server.
func (r *run) proxies() []*chaos.Proxy {
	var ps []*chaos.Proxy
	for _, a := range r.srv.Addrs {
		p, err := chaos.NewProxy(a, r.tg.Backend.Protocol())
		if err != nil {
			r.t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// open makes a Locker over addrs, trying again until timeout (a server may
// be restarting).
func (r *run) open(addrs []string, timeout time.Duration) (Locker, error) {
	return r.tg.openRetry(addrs, r.store, timeout)
}

// checkLoop runs the Recorder's incremental checks.
func (r *run) checkLoop(stop <-chan struct{}) {
	every(200*time.Millisecond, stop, func() {
		// Children report within a few tens of milliseconds, or after a
		// freeze: check token order of grants older than that.
		r.rec.Check(r.clk.Now() - Stamp(3*r.tg.Bound+5*time.Second))
	})
}

// probe asks for a fresh key every half second with a deadline of
// LivenessBound; while the server is quiet, it must be granted.
func (r *run) probe(stop <-chan struct{}) {
	i := 0
	every(500*time.Millisecond, stop, func() {
		i++
		key := fmt.Sprintf("probe/%d", i)
		r.probed.Store(int64(i))
		ctx, cancel := context.WithTimeout(context.Background(), LivenessBound)
		start := r.clk.Now()
		lease, err := r.probeLk.Lock(ctx, key)
		end := r.clk.Now()
		cancel()
		if err == nil {
			uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
			lease.Unlock(uctx)
			ucancel()
		}
		if !r.rec.Quiet(start, end, r.tg.Recovery) {
			return
		}
		r.rec.Stat("probe", 1)
		if err != nil {
			r.rec.Violate(Violation{Kind: "liveness", Check: "probe", At: end, From: start, Key: key, Proc: parentProc,
				Text: fmt.Sprintf("free key %q not granted within %v while no server fault was under way (none for %v before): %s", key, LivenessBound, r.tg.Recovery, short(err))})
		}
	})
}

// waitLive waits until every lease of this process was seen ended.
func (r *run) waitLive(d time.Duration) { r.env.live.wait(d, r.clk, r.rec) }

// heal ends every fault: proxies pass everything again, the server and
// the children run.
func (r *run) heal() {
	for _, s := range r.slots {
		healProxies(s.proxies)
	}
	for _, c := range r.children {
		healProxies(c.proxies)
	}
	healProxies(r.envProxies)
	r.dropMu.Lock()
	for _, d := range r.drops {
		d.stop()
	}
	r.dropMu.Unlock()
}

func healProxies(ps []*chaos.Proxy) {
	for _, p := range ps {
		p.Delay(0, 0)
		p.Heal()
	}
}

// regrant checks that every hot key and set key can be granted again, to
// a fresh Locker, and that its write is accepted.
func (r *run) regrant() {
	lk, err := r.open(r.serverAddrs(), 30*time.Second)
	if err != nil {
		r.problem("open a Locker to grant the keys again: %v", err)
		return
	}
	defer lk.Close()
	for _, key := range append(slices.Clone(r.env.keys), setKeys()...) {
		ctx, cancel := context.WithTimeout(context.Background(), r.tg.Bound+5*time.Second)
		lease, err := lk.Lock(ctx, key)
		cancel()
		now := r.clk.Now()
		if err != nil {
			r.rec.Violate(Violation{Kind: "no-regrant", At: now, From: now, Key: key, Proc: parentProc,
				Text: fmt.Sprintf("key %q not granted again within %v after the run: %s", key, r.tg.Bound+5*time.Second, short(err))})
			continue
		}
		id := fmt.Sprintf("final/%s", key)
		r.rec.Grant(LeaseRec{ID: id, Key: key, Holder: "final", Proc: parentProc, Op: "lock", Token: lease.Token(),
			Granted: now, LastHeld: now, Deadline: r.clk.At(lease.Deadline()), UnlockAt: Never, DoneAt: Never})
		if !r.rec.Write(key, id, now, lease.Token()) {
			r.rec.Violate(Violation{Kind: "no-regrant", At: now, From: now, Key: key, Proc: parentProc,
				Text: fmt.Sprintf("key %q granted again after the run, but its write (token %d) was refused", key, lease.Token())})
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		lease.Unlock(ctx)
		cancel()
	}
	r.rec.Final()
}

// residue waits for the backend to hold nothing of the run's leases (a
// grant left by a failed release expires within the bound), then reports
// what is left.
func (r *run) residue() {
	if r.srv == nil {
		for _, key := range r.memoryKeys() {
			if e := r.store.Entries(key); len(e) > 0 {
				now := r.clk.Now()
				r.rec.Violate(Violation{Kind: "residue", Check: "end", At: now, From: now, Key: key, Proc: parentProc,
					Text: fmt.Sprintf("the memory store still holds entries of key %q: %v", key, e)})
			}
		}
		return
	}
	deadline := time.Now().Add(r.tg.Bound + 5*time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		found, err := r.srv.Residue(ctx)
		cancel()
		if err != nil {
			r.problem("searching the backend for residue: %v", err)
			return
		}
		if len(found) == 0 {
			return
		}
		if time.Now().After(deadline) {
			now := r.clk.Now()
			for _, f := range found {
				r.rec.Violate(Violation{Kind: "residue", Check: "end", At: now, From: now, Proc: parentProc,
					Text: fmt.Sprintf("left on the backend %v after every Locker closed: %s", r.tg.Bound+5*time.Second, f)})
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pslot is a client position in the test process: a Locker over its own
// proxy, replaced by a new one when closed under load.
type pslot struct {
	r        *run
	name     string
	proxies  []*chaos.Proxy
	busy     atomic.Bool // a partition or a churn holds it
	delays   atomic.Bool // a delay holds its proxies' command connections
	psDelays atomic.Bool // a delay holds their pub/sub connections
	stall    atomic.Int64
	lockerSlot
}

func (s *pslot) takeStall() time.Duration { return time.Duration(s.stall.Swap(0)) }

func (s *pslot) addrs() []string {
	if len(s.proxies) == 0 {
		return s.r.serverAddrs()
	}
	return s.r.clientAddrs(s.proxies)
}

func (s *pslot) armDelay(d time.Duration) func() {
	return s.r.armDelay(s.proxies, &s.delays, s.name, d)
}

func (s *pslot) armDrop(class string, n int) func() {
	if len(s.proxies) == 0 {
		return nil
	}
	return s.r.armDrop(s.proxies, s.name, class, n)
}

// openNext opens the slot's next Locker.
func (s *pslot) openNext(timeout time.Duration) error {
	lk, err := s.r.open(s.addrs(), timeout)
	if err != nil {
		return err
	}
	s.install(lk, func(gen int) string { return fmt.Sprintf("%s.%d", s.name, gen) })
	return nil
}

// closeCurrent closes the slot's Locker, checking Close, and leaves the
// slot without one.
func (s *pslot) closeCurrent() {
	in := s.current()
	if in == nil {
		return
	}
	in.closeAndCheck(s.r.env)
	s.remove(in)
}

// churn closes the slot's Locker under load (its workers keep calling it
// until the new one is in), with the slot partitioned if partition (its
// releases fail), and opens a new one.
func (s *pslot) churn(partition bool) {
	in := s.current()
	if in == nil {
		return
	}
	in.waitHolding(2 * time.Second)
	if partition {
		for _, p := range s.proxies {
			p.Partition()
		}
	}
	in.closeAndCheck(s.r.env)
	if partition {
		healProxies(s.proxies)
	}
	if err := s.openNext(30 * time.Second); err != nil {
		s.r.problem("reopen %s: %v", s.name, err)
		s.remove(in)
	}
}

// dropArm is a set of drop rules (one per proxy of a slot) and the lost
// (or held) replies they caused, recorded as faults of kind.
type dropArm struct {
	kind        string // lost-reply, or held-reply (see armHold)
	slot, class string
	rules       []*chaos.DropRule
	stopped     time.Time
	once        sync.Once
	lost        []string // the commands whose replies were lost
	recorded    bool
}

func (d *dropArm) stop() {
	d.once.Do(func() {
		for _, rl := range d.rules {
			rl.Stop()
		}
		d.stopped = time.Now()
	})
}

// armDelay delays the replies of the proxies' command connections by d,
// unless busy (a delay under way) or there are none; stop ends it. It is recorded as a fault.
func (r *run) armDelay(ps []*chaos.Proxy, busy *atomic.Bool, slot string, d time.Duration) func() {
	if len(ps) == 0 || !busy.CompareAndSwap(false, true) {
		return nil
	}
	end := r.rec.FaultStart(Fault{Kind: "slow-refresh", Target: fmt.Sprintf("%s %v", slot, d.Round(time.Millisecond))})
	for _, p := range ps {
		p.DelayCommands(0, d)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, p := range ps {
				p.DelayCommands(0, 0)
			}
			end()
			busy.Store(false)
		})
	}
}

// armDrop makes the proxies lose the replies of the next n requests of
// class ("any": any mutating request; "grant": a waiter's step too);
// stop disarms.
func (r *run) armDrop(ps []*chaos.Proxy, slot, class string, n int) func() {
	match := r.matcher(class)
	d := &dropArm{kind: "lost-reply", slot: slot, class: class}
	for _, p := range ps {
		d.rules = append(d.rules, p.DropReplies(match, n))
	}
	r.dropMu.Lock()
	r.drops = append(r.drops, d)
	r.dropMu.Unlock()
	return d.stop
}

// watchDrops records the replies each rule lost: one fault per rule, with
// the commands, and each lost reply in the statistics.
func (r *run) watchDrops(stop <-chan struct{}) {
	every(20*time.Millisecond, stop, r.drainDrops)
	r.drainDrops()
}

func (r *run) drainDrops() {
	r.dropMu.Lock()
	defer r.dropMu.Unlock()
	keep := r.drops[:0]
	for _, d := range r.drops {
		n := len(d.lost)
		for _, rl := range d.rules {
			for len(rl.Dropped()) > 0 {
				q := <-rl.Dropped()
				d.lost = append(d.lost, q.Name())
				r.rec.Stat(d.kind, 1)
			}
		}
		if len(d.lost) > n {
			text := fmt.Sprintf("%s %s (%s)", d.slot, strings.Join(d.lost[n:], " "), d.class)
			if !d.recorded {
				d.recorded = true
				r.rec.Fault(Fault{Kind: d.kind, Target: text})
			} else {
				r.rec.Event(Event{At: r.clk.Now(), Kind: "fault", Text: d.kind + " " + text})
			}
		}
		if d.stopped.IsZero() || time.Since(d.stopped) < 5*time.Second {
			keep = append(keep, d)
		}
	}
	r.drops = keep
}

// listen serves the children's reports.
func (r *run) listen() error {
	srv := rpc.NewServer()
	r.parent = &ParentRPC{r: r}
	if err := srv.RegisterName("Parent", r.parent); err != nil {
		return err
	}
	rs, err := chaos.ServeRPC(srv)
	r.rpcSrv = rs
	return err
}

func (r *run) closeRPC() { r.rpcSrv.Close() }

// every calls f every period until stop closes.
func every(period time.Duration, stop <-chan struct{}, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}

// retry calls f until it succeeds, five times at most, a second apart; it
// reports the failures as problems, and the last one fails the test.
func (r *run) retry(what string, f func() error) {
	for try := 0; ; try++ {
		err := f()
		if err == nil {
			return
		}
		if try == 5 {
			r.t.Fatalf("%s: %v", what, err)
		}
		r.problem("%s: %v (trying again)", what, err)
		time.Sleep(time.Second)
	}
}

// tally renders counts by name, sorted.
func tally(m map[string]int, sep string) string {
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("%s%s%d", k, sep, v))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}
