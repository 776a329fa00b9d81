// Command bench measures dlock's drivers against peer libraries and against
// the backend's own round trip, side by side in one run, and prints one
// table: scenario × library × figure, with each figure's ratio to the
// scenario's baseline (the backend's cheapest round trip, measured in the
// same run against the same server) and to the best peer on the same
// backend. It then checks the targets of the benchmark issue.
//
// It is a module of its own (github.com/dlock-go/dlock/bench), so that the
// peers (go-redsync/redsync v4, bsm/redislock; go-zookeeper's zk.Lock) never
// enter dlock's go.mod. Run it with `make bench`, which starts the servers
// through dlock's test harness (internal/testsupport/testserver/cmd/serve) and passes
// their addresses in DLOCK_REDIS_ADDR, DLOCK_MEMCACHED_ADDR and
// DLOCK_ZOOKEEPER_ADDR, and PostgreSQL's URL in DLOCK_POSTGRES_URL; a
// backend without an address is left out. A peer that cannot be built
// here has rows that say so (lib.missing).
//
// The scenarios (see each file): uncontended.go, handoff.go,
// contention.go (hot key, many keys), renewal.go, semaphore.go (permits
// against the same driver's lock; no Go peer has a distributed semaphore),
// sustain.go (PostgreSQL's hot key for a minute, by thirds, with its dead
// tuples); postgres.go has PostgreSQL's clients, probe and server CPU.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

type config struct {
	addr           map[string]string // backend -> address
	only           map[string]bool   // libraries to run; all when empty
	run            string            // unique part of the keys
	cycles         int
	handoffs       int
	handoffBudget  time.Duration
	hotContenders  []int
	hotDur         time.Duration
	manyContenders int
	manyDur        time.Duration
	baseDur        time.Duration
	leases         []int
	renewTTL       time.Duration
	rounds         int // interleaved alternations of the contention scenarios
	sustainDur     time.Duration
}

var backendOrder = []string{"redis", "memcached", "zookeeper", "postgres", "etcd"}

// backends returns the backends with an address and a library to run.
func (c *config) backends() []string {
	var bs []string
	for _, b := range backendOrder {
		if _, ok := c.addr[b]; ok && len(c.libs(b)) > 0 {
			bs = append(bs, b)
		}
	}
	return bs
}

// libs returns the libraries to run on backend.
func (c *config) libs(backend string) []lib {
	var ls []lib
	for _, l := range libraries() {
		if l.backend == backend && l.missing == "" && c.wants(l.name) {
			ls = append(ls, l)
		}
	}
	return ls
}

// unmeasured adds, for each library of backend that cannot be measured
// (lib.missing), a row of scenario whose figures say why: a peer that
// does not build is shown as missing, never dropped.
func (c *config) unmeasured(t *table, scenario, backend string, figs ...string) {
	for _, l := range libraries() {
		if l.backend != backend || l.missing == "" || !c.wants(l.name) {
			continue
		}
		r := &row{scenario: scenario, backend: backend, lib: l.name, kind: l.kind()}
		for _, f := range figs {
			r.figs = append(r.figs, figure{name: f, na: l.missing})
		}
		t.add(r)
	}
}

func (c *config) wants(name string) bool {
	if len(c.only) == 0 {
		return true
	}
	base, _, _ := strings.Cut(name, " ")
	return c.only[name] || c.only[base]
}

// key returns a key unique to this run.
func (c *config) key(parts ...string) string {
	for i, p := range parts {
		parts[i] = strings.NewReplacer(" ", "-", "(", "", ")", "", "/", "-").Replace(p)
	}
	return "bench/" + c.run + "/" + strings.Join(parts, "/")
}

func main() {
	os.Exit(run())
}

func run() int {
	cfg := &config{addr: map[string]string{}, only: map[string]bool{}, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	var (
		out       = flag.String("out", "", "also write the report to this file (a directory: a file named by the date and host in it)")
		only      = flag.String("libs", "", "comma-separated libraries to run (e.g. redisnx,redsync); all when empty")
		scenarios = flag.String("scenarios", "uncontended,handoff,hotkey,manykeys,renewal,semaphore,sustain", "comma-separated scenarios to run")
		hot       = flag.String("hot-contenders", "8,32", "contender counts of the hot-key scenario")
		leases    = flag.String("leases", "10000,100000", "lease counts of the renewal scenario")
		short     = flag.Bool("short", false, "a quick run with small counts and durations (a smoke test, not for figures)")
	)
	flag.IntVar(&cfg.cycles, "cycles", 3000, "timed uncontended cycles per library")
	flag.IntVar(&cfg.handoffs, "handoffs", 300, "hand-offs per library, at most")
	flag.DurationVar(&cfg.handoffBudget, "handoff-budget", 12*time.Second, "longest hand-off run per library")
	flag.DurationVar(&cfg.hotDur, "hot", 6*time.Second, "duration of each hot-key run (all rounds)")
	flag.IntVar(&cfg.manyContenders, "many-contenders", 32, "contenders of the many-keys scenario")
	flag.DurationVar(&cfg.manyDur, "many", 6*time.Second, "duration of each many-keys run (all rounds)")
	flag.IntVar(&cfg.rounds, "rounds", 3, "interleaved alternations of the libraries in the hot-key and many-keys scenarios (each runs its share of -hot, -many)")
	flag.DurationVar(&cfg.baseDur, "base", time.Second, "duration of each throughput baseline")
	flag.DurationVar(&cfg.sustainDur, "sustain", time.Minute, "duration of the sustained hot key on PostgreSQL (its grants/s by thirds)")
	flag.DurationVar(&cfg.renewTTL, "renew-ttl", 3*time.Second, "lease TTL of the renewal scenario (renewed every TTL/3, held 3 TTLs)")
	flag.Parse()
	for _, v := range strings.Split(*only, ",") {
		if v = strings.TrimSpace(v); v != "" {
			cfg.only[v] = true
		}
	}
	var err error
	if cfg.hotContenders, err = ints(*hot); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -hot-contenders:", err)
		return 2
	}
	if cfg.rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -rounds: want at least 1")
		return 2
	}
	if cfg.leases, err = ints(*leases); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -leases:", err)
		return 2
	}
	if *short {
		cfg.cycles, cfg.handoffs, cfg.handoffBudget = 200, 20, 3*time.Second
		cfg.hotDur, cfg.manyDur, cfg.baseDur = time.Second, time.Second, 200*time.Millisecond
		cfg.leases, cfg.renewTTL = []int{2000}, time.Second
		if !flagSet("sustain") {
			cfg.sustainDur = 6 * time.Second
		}
	}
	for b, env := range map[string]string{"redis": "DLOCK_REDIS_ADDR", "memcached": "DLOCK_MEMCACHED_ADDR", "zookeeper": "DLOCK_ZOOKEEPER_ADDR", "postgres": "DLOCK_POSTGRES_URL", "etcd": "DLOCK_ETCD_ADDR"} {
		if a := os.Getenv(env); a != "" {
			a, _, _ = strings.Cut(a, ",") // the first server of a list
			cfg.addr[b] = a
		}
	}
	if len(cfg.addr) == 0 {
		fmt.Fprintln(os.Stderr, "bench: no servers: set DLOCK_REDIS_ADDR, DLOCK_MEMCACHED_ADDR, DLOCK_ZOOKEEPER_ADDR, DLOCK_POSTGRES_URL and/or DLOCK_ETCD_ADDR, or run `make bench`, which starts them")
		return 2
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()

	var head bytes.Buffer
	started := time.Now()
	fmt.Fprintf(&head, "dlock bench, %s\n", started.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(&head, "command:  %s\n", command())
	fmt.Fprintf(&head, "machine:  %s\n", machine())
	var servers []string
	for _, b := range backendOrder {
		if a, ok := cfg.addr[b]; ok {
			servers = append(servers, serverVersion(ctx, b, a)+" at "+serverAddr(b, a))
		}
	}
	fmt.Fprintf(&head, "servers:  %s (loopback, same host)\n", strings.Join(servers, "; "))
	fmt.Fprintf(&head, "load:     %s (1-minute load average at the start)\n", loadAvg())
	fmt.Fprintf(&head, "settings: %d uncontended cycles; hand-offs ≤%d or %v; hot key %v for %v; many keys %d for %v; baselines %v; renewal %v leases, TTL %v; sustained hot key %v\n",
		cfg.cycles, cfg.handoffs, cfg.handoffBudget, cfg.hotContenders, cfg.hotDur, cfg.manyContenders, cfg.manyDur, cfg.baseDur, cfg.leases, cfg.renewTTL, cfg.sustainDur)
	fmt.Fprintln(&head, "libraries:")
	for _, l := range libraries() {
		if _, ok := cfg.addr[l.backend]; ok && cfg.wants(l.name) {
			note := l.note
			if l.missing != "" {
				note += ": " + l.missing
			}
			fmt.Fprintf(&head, "  %-16s %s\n", l.name, note)
		}
	}
	os.Stderr.Write(head.Bytes())

	t := &table{}
	steps := []struct {
		name string
		run  func(context.Context, *config, *table) error
	}{
		{"uncontended", runUncontended},
		{"handoff", runHandoff},
		{"hotkey", runHotKey},
		{"manykeys", runManyKeys},
		{"renewal", runRenewal},
		{"semaphore", runSemaphore},
		{"sustain", runSustain},
	}
	want := strings.Split(*scenarios, ",")
	for _, s := range steps {
		if !slices.Contains(want, s.name) {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "bench: %s...\n", s.name)
		if err := s.run(ctx, cfg, t); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.name, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "bench: %s done in %v\n", s.name, time.Since(t0).Round(100*time.Millisecond))
	}

	var report bytes.Buffer
	report.Write(head.Bytes())
	fmt.Fprintf(&report, "duration: %v\n\n", time.Since(started).Round(time.Second))
	t.write(&report)
	fmt.Fprintln(&report)
	for _, n := range rueidisNotes() {
		fmt.Fprintln(&report, "note: "+n)
	}
	writeTargets(&report, targets(t))
	fmt.Fprintln(&report)
	fmt.Fprint(&report, legend)
	os.Stdout.Write(report.Bytes())

	if *out != "" {
		path := *out
		if strings.HasSuffix(path, "/") { // a directory, made if missing
			if err := os.MkdirAll(path, 0o755); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				return 1
			}
		}
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			host, _ := os.Hostname()
			path = filepath.Join(path, fmt.Sprintf("bench-%s-%s.txt", started.Format("2006-01-02-150405"), host))
		}
		if err := os.WriteFile(path, report.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "bench: report written to %s\n", path)
	}
	return 0
}

// command is how the bench was started: BENCH_COMMAND (make bench sets
// it) and the program's own arguments.
func command() string {
	args := strings.Join(append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...), " ")
	if c := os.Getenv("BENCH_COMMAND"); c != "" {
		return c + "  (" + args + ")"
	}
	return args
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func ints(s string) ([]int, error) {
	var r []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		r = append(r, n)
	}
	return r, nil
}

const legend = `How to read it:
  x baseline   the figure divided by the same figure of the scenario's baseline on the same backend:
               uncontended: two round trips back to back (2×PING, 2×version, 2×exists, 2×SELECT 1);
               hand-off: one round trip from the same idle state, so the ratio is in round trips
               (a hand-off runs from the Unlock call, the release's own round trip included);
               hot key, many keys: as many goroutines making cycles of two round trips, so the
               ratio is the share of the backend's raw capacity at that concurrency;
               semaphore: the same, for permits of a semaphore of 4 and for the same driver's
               lock on one key (no Go peer has a distributed semaphore to compare with).
  x best peer  the figure divided by the best peer's on the same backend (lower is better for
               times, allocations, commands and spreads; higher for grants/s).
  waits        from wanting the lock to the grant, across Lock calls that gave up meanwhile;
               waits cut off by the end of a run count as ending then.
  Peers run with their documented defaults and with the retry delay tuned down to 1 ms ("(1ms)");
               rueidislock, which waits for the server's invalidation and has no retry delay, with
               its defaults (3 keys on one server) and its README's one-server setting ("(1 key)").
  sustained    the PostgreSQL hot key for -sustain (60 s), autovacuum as the server ships it:
               grants/s in each third, the last third's share of the first's, and n_dead_tup of
               the driver's tables (pg_stat_user_tables, schema dlock) at the start and the end.
  advisory (1ms) [baseline]  on PostgreSQL, a second baseline: the plain session-level advisory
               lock most Go code takes (pg_try_advisory_lock every 1 ms, pg_advisory_unlock, one
               connection per worker; no TTL, fencing or queue). Its ratios are to the round-trip
               baseline, like a library's; it is not a peer.
  server CPU   Redis INFO cpu; memcached stats rusage; PostgreSQL: the postmaster and every process
               it forked (/proc; backends, background workers, autovacuum), when it runs on this host.
`
