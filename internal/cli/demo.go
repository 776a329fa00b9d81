//go:build demo

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/lock"
)

const demoUsage = `Usage: dlock demo [flags]

Runs worker processes that contend for a few keys on every reachable network
backend, one backend after the other, and checks what the locks promise: no
two workers ever hold a key at once, and fencing tokens only grow. Then, on
each backend, holder A loses a lease (the server paused where the demo
started it, else A's grant deleted): A's Done fires, B is granted the key,
and a resource that checks fencing tokens refuses A's late write. Prints
live progress, two lines of the lost lease, then a table per backend.

Backends: -url (repeatable), else $DLOCK_URL, else each compiled-in network
driver on its server's standard port on localhost: redisnx:// and
rediswatch://localhost:6379, memcached://localhost:11211,
zookeeper://localhost:2181/dlock-demo, postgres://localhost:5432/postgres
(user and password from PGUSER and PGPASSWORD, as psql takes them; or
-url postgres://USER:PASSWORD@HOST:5432/DB). With -start-servers the demo
starts local servers on free ports instead, as the tests do (make demo):
redis-server, memcached, ZooKeeper and PostgreSQL, those installed
(apt-get install redis-server memcached zookeeper postgresql).
`

// urlsFlag collects a repeated -url.
type urlsFlag []string

func (u *urlsFlag) String() string { return strings.Join(*u, " ") }

func (u *urlsFlag) Set(s string) error {
	if s == "" {
		return fmt.Errorf("empty URL")
	}
	*u = append(*u, s)
	return nil
}

// levelName is the -log-level to hand to a child dlock process.
func (l *logFlags) levelName() string {
	if l.verbose {
		return "info"
	}
	return l.level
}

type demoConfig struct {
	urls         urlsFlag
	startServers bool
	workers      int
	keys         int
	duration     time.Duration
	hold         time.Duration
	ttl          time.Duration
	log          logFlags
	out          io.Writer
	term         bool
}

func cmdDemo(args []string) int {
	d := &demoConfig{out: os.Stdout}
	fs := newFlagSet("demo", demoUsage)
	fs.Var(&d.urls, "url", "backend URL to include (repeatable; default $DLOCK_URL, else localhost standard ports)")
	fs.BoolVar(&d.startServers, "start-servers", false, "start local redis-server, memcached, ZooKeeper and PostgreSQL on free ports for the demo")
	fs.IntVar(&d.workers, "workers", 4, "worker processes per backend")
	fs.IntVar(&d.keys, "keys", 3, "keys the workers contend for, per backend")
	durationVar(fs, &d.duration, "duration", 2500*time.Millisecond, "contention time per backend, a `duration` or seconds")
	durationVar(fs, &d.hold, "hold", 2*time.Millisecond, "mean time a worker holds a lock, a `duration` or seconds")
	durationVar(fs, &d.ttl, "ttl", 5*time.Second, "lease TTL, a `duration` or seconds (0: the URL's ttl= or 30s)")
	d.log.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return parseFailed("demo", err, os.Stdout, os.Stderr)
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(os.Stderr, "dlock demo: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	case d.workers < 2 || d.workers > 64:
		fmt.Fprintln(os.Stderr, "dlock demo: -workers must be from 2 to 64")
		return exitUsage
	case d.keys < 1 || d.keys > 100:
		fmt.Fprintln(os.Stderr, "dlock demo: -keys must be from 1 to 100")
		return exitUsage
	case d.duration <= 0 || d.hold < 0 || d.ttl < 0:
		fmt.Fprintln(os.Stderr, "dlock demo: -duration must be positive, -hold and -ttl not negative")
		return exitUsage
	}
	log, err := d.log.logger(os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock demo: %v\n", err)
		return exitUsage
	}
	routeLibraryLogs(log)
	d.term = isTerminal(os.Stdout)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return d.run(ctx)
}

func (d *demoConfig) printf(format string, args ...any) { fmt.Fprintf(d.out, format, args...) }

func (d *demoConfig) run(ctx context.Context) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock demo: cannot find my own binary to start workers: %v\n", err)
		return exitBackend
	}
	d.printf("dlock demo: %d worker processes contend for %d keys on each backend for %v, entering a shared\n", d.workers, d.keys, d.duration)
	d.printf("resource right after each grant and leaving it before the release: a second holder inside is an\n")
	d.printf("overlap, a token not above the last is stale; both must stay 0. Then holder A loses a lease (server\n")
	d.printf("paused, or grant deleted): its Done fires, B is granted, and the resource refuses A's late write.\n\n")

	candidates, stop := d.candidates()
	defer stop()
	targets := d.reachable(ctx, candidates)
	if len(targets) == 0 {
		d.printf("\nNo backend is reachable, so there is nothing to demonstrate.\n")
		d.printf("Start local servers on free ports for the demo:  %s demo -start-servers   (or: make demo)\n", os.Args[0])
		d.printf("or point it at yours:  %s demo -url redisnx://HOST:6379 -url memcached://HOST:11211 -url zookeeper://HOST:2181/dlock-demo\n", os.Args[0])
		d.printf("                       -url postgres://USER:PASSWORD@HOST:5432/DB\n")
		d.printf("(servers: apt-get install redis-server memcached zookeeper postgresql)\n")
		return exitBackend
	}

	dir, err := os.MkdirTemp("", "dlock-demo-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock demo: %v\n", err)
		return exitBackend
	}
	defer os.RemoveAll(dir)
	runID := randomID()
	d.printf("\n")
	var all []*backendStats
	for _, t := range targets {
		if ctx.Err() != nil {
			break
		}
		st := d.runBackend(ctx, self, dir, runID, t)
		d.showFencing(ctx, st, t, fmt.Sprintf("dlock-demo/%s/%s/fencing", runID, t.name))
		all = append(all, st)
	}
	if ctx.Err() != nil {
		d.printf("\ninterrupted\n")
		return exitSignal + int(syscall.SIGINT)
	}
	return d.verdict(all)
}

// candidates returns the backends to try: the servers -start-servers
// started, after those of -url; else $DLOCK_URL; else each compiled-in
// network driver on its standard port on localhost. stop stops the
// servers started.
func (d *demoConfig) candidates() (targets []target, stop func()) {
	for _, u := range d.urls {
		targets = append(targets, target{url: u})
	}
	if d.startServers {
		started, stop := d.provision()
		return append(targets, started...), stop
	}
	if len(targets) == 0 {
		if env := os.Getenv("DLOCK_URL"); env != "" {
			return []target{{url: env}}, func() {}
		}
		for _, b := range compiledIn() {
			targets = append(targets, target{url: b.defaultURL})
		}
	}
	return targets, func() {}
}

// showFencing runs the fencing scene on t's backend and prints its two
// lines, or why it failed, which fails the backend.
func (d *demoConfig) showFencing(ctx context.Context, st *backendStats, t target, key string) {
	s, err := d.fencingScene(ctx, t, key)
	if err == nil {
		lines := s.lines()
		d.printf("%-11s %s\n%-11s %s\n", t.name, lines[0], t.name, lines[1])
		err = s.check()
	}
	if err != nil && ctx.Err() == nil {
		d.printf("%-11s fencing scene FAILED: %v\n", t.name, err)
		st.fail("fencing scene: %v", err)
	}
}

// verdict prints the table and what it means, and returns the exit
// status: 0 when every backend passed.
func (d *demoConfig) verdict(all []*backendStats) int {
	d.printf("\n")
	writeTable(d.out, all)
	d.printf("\n")
	failed := 0
	for _, s := range all {
		if !s.ok() {
			failed++
			d.printf("%s FAILED: %s\n", s.name, s.why())
		}
	}
	if failed > 0 {
		return 1
	}
	d.printf("%s: no overlapping grants, tokens strictly increasing, each lost lease's Done fired, each stale write refused.\n", plural(len(all), "backend"))
	d.printf("Wait p50/p99: how long Lock took, from call to grant, while %d workers wanted %d keys.\n", d.workers, d.keys)
	return exitOK
}

// errNotInstalled is wrapped by the error of a server startServers did not
// start because it is not installed (nor named by an address variable).
var errNotInstalled = errors.New("not installed")

// provision starts the servers of the compiled-in network backends and
// returns their URLs.
func (d *demoConfig) provision() (targets []target, stop func()) {
	var kinds []serverKind
	for _, b := range compiledIn() {
		if !slices.Contains(kinds, b.server) {
			kinds = append(kinds, b.server)
		}
	}
	if len(kinds) == 0 {
		return nil, func() {}
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	d.printf("Starting local servers on free ports: %s ...\n", strings.Join(names, ", "))
	verbose := d.log.levelName() == "info" || d.log.levelName() == "debug"
	var mu sync.Mutex
	started, errs, stop := startServers(kinds, func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if !verbose && !strings.HasPrefix(msg, "started ") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		d.printf("  %s\n", msg)
	})
	for _, k := range kinds {
		switch err := errs[k]; {
		case errors.Is(err, errNotInstalled):
			d.printf("  %s not installed: %v\n", k, firstLine(strings.TrimPrefix(err.Error(), errNotInstalled.Error()+": ")))
		case err != nil:
			d.printf("  %s failed to start: %v\n", k, firstAndLastLine(err.Error()))
		}
	}
	for _, b := range compiledIn() {
		if s, ok := started[b.server]; ok {
			targets = append(targets, target{url: b.urlFor(s), pause: s.pause})
		}
	}
	return targets, stop
}

// reachable probes urls concurrently and returns the backends that answer,
// in order, saying what it left out and why.
func (d *demoConfig) reachable(ctx context.Context, candidates []target) []target {
	d.printf("Backends:\n")
	errs := make([]error, len(candidates))
	var wg sync.WaitGroup
	for i, c := range candidates {
		switch s := schemeOf(c.url); {
		case s == "memory":
			errs[i] = errors.New("left out: a memory:// store lives in one process, and the workers are separate processes")
		case notCompiledIn(c.url) != "":
			errs[i] = fmt.Errorf("left out: this dlock has no %s backend (%s has it)", s, etcdCommand)
		case !isCompiledIn(s) && slices.Contains(lock.Schemes(), s):
			errs[i] = fmt.Errorf("left out: the demo does not run on %s:// (it runs on %s)", s, strings.Join(compiledSchemes(), ", "))
		case !isCompiledIn(s):
			errs[i] = fmt.Errorf("left out: no driver for scheme %q in this binary (have %s)", s, strings.Join(compiledSchemes(), ", "))
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = probe(ctx, c.url)
			}()
		}
	}
	wg.Wait()
	var out []target
	for i, c := range candidates {
		name := schemeOf(c.url)
		if b, ok := backendOf(name); ok {
			name = b.scheme // postgresql:// is postgres
		}
		if errs[i] != nil {
			d.printf("  %-11s %-40s %s\n", name, backendName(c.url), firstLine(errs[i].Error()))
			continue
		}
		if slices.ContainsFunc(out, func(t target) bool { return t.name == name }) {
			name = fmt.Sprintf("%s#%d", name, i+1)
		}
		d.printf("  %-11s %-40s ok\n", name, backendName(c.url))
		c.name = name
		out = append(out, c)
	}
	return out
}

func isCompiledIn(scheme string) bool {
	_, ok := backendOf(scheme)
	return ok
}

func compiledSchemes() []string {
	var s []string
	for _, b := range compiledIn() {
		s = append(s, b.scheme)
	}
	return s
}

// firstAndLastLine is firstLine with the last line of s, where a failed
// program's output ends with what went wrong.
func firstAndLastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) < 2 {
		return firstLine(s)
	}
	return lines[0] + " ... " + strings.TrimSpace(lines[len(lines)-1])
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// runBackend runs the workers of one backend and returns their statistics.
func (d *demoConfig) runBackend(ctx context.Context, self, dir, runID string, t target) *backendStats {
	st := &backendStats{name: t.name, url: t.url}
	keys := make([]string, d.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("dlock-demo/%s/%s/key-%d", runID, t.name, i+1)
	}
	resDir := filepath.Join(dir, strings.ReplaceAll(t.name, "#", "-"))
	if err := os.Mkdir(resDir, 0o755); err != nil {
		st.fail("%v", err)
		return st
	}
	wctx, cancel := context.WithTimeout(ctx, d.duration+time.Minute)
	defer cancel()
	var procs []*workerProc
	defer func() { // on failure: stop the workers started so far
		for _, p := range procs {
			p.cmd.Process.Kill()
			p.wait()
		}
	}()
	for range d.workers {
		p, err := startWorker(wctx, self, st,
			"-url", t.url, "-keys", strings.Join(keys, ","), "-resources", resDir,
			"-duration", d.duration.String(), "-hold", d.hold.String(), "-ttl", d.ttl.String(),
			"-log-level", d.log.levelName())
		if err != nil {
			st.fail("starting a worker: %v", err)
			return st
		}
		procs = append(procs, p)
	}
	// Start them together, once every worker is connected.
	if err := awaitReady(ctx, procs); err != nil {
		st.fail("%v", err)
		return st
	}
	if ctx.Err() != nil {
		return st
	}
	for _, p := range procs {
		io.WriteString(p.stdin, "go\n")
	}
	d.showProgress(st, procs)
	for _, p := range procs {
		if err := p.wait(); err != nil {
			st.fail("worker %v", err)
		}
	}
	procs = nil
	for i := range keys {
		r, err := openResource(filepath.Join(resDir, fmt.Sprint(i)))
		if err != nil {
			continue // never entered
		}
		if inside, _, err := r.state(); err != nil || inside {
			st.fail("resource of %s still marked busy after all workers left", keys[i])
		}
		r.Close()
	}
	return st
}

// awaitReady waits until every worker said it is connected, for a minute
// at most, or until ctx ends (then nil: the caller checks ctx).
func awaitReady(ctx context.Context, procs []*workerProc) error {
	ready := time.NewTimer(time.Minute)
	defer ready.Stop()
	for _, p := range procs {
		select {
		case err := <-p.ready:
			if err != nil {
				return fmt.Errorf("worker: %v", err)
			}
		case <-ready.C:
			return errors.New("workers not connected after a minute")
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// showProgress shows st's progress until the workers' output ends: on a
// terminal, a live line redrawn in place; elsewhere (a pipe, a log) only
// the final line.
func (d *demoConfig) showProgress(st *backendStats, procs []*workerProc) {
	begin := time.Now()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for _, p := range procs {
	wait:
		for {
			select {
			case <-p.done:
				break wait
			case <-ticker.C:
				if d.term {
					d.printf("%s%s", clearLine, st.progress(time.Since(begin), d.duration))
				}
			}
		}
	}
	if d.term {
		d.printf("%s", clearLine)
	}
	st.elapsed = d.duration
	d.printf("%s\n", st.progress(d.duration, d.duration))
}

// workerProc is one running worker process.
type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan error    // first line read: nil if it said ready
	done  chan struct{} // standard output closed
	once  sync.Once
	err   error
}

func startWorker(ctx context.Context, self string, st *backendStats, args ...string) (*workerProc, error) {
	cmd := exec.CommandContext(ctx, self, append([]string{demoWorkerCmd}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &workerProc{cmd: cmd, stdin: stdin, ready: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			var ev workerEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				st.fail("worker wrote %q: %v", sc.Text(), err)
				continue
			}
			if first {
				first = false
				if !ev.Ready {
					p.ready <- fmt.Errorf("first line %q is not ready", sc.Text())
				} else {
					p.ready <- nil
				}
				continue
			}
			st.add(ev)
		}
		if first {
			p.ready <- errors.New("exited before it was ready (see its message above)")
		}
	}()
	return p, nil
}

// wait waits for the process once and returns how it failed, if it did.
func (p *workerProc) wait() error {
	p.once.Do(func() {
		<-p.done
		if err := p.cmd.Wait(); err != nil {
			p.err = fmt.Errorf("pid %d: %v", p.cmd.Process.Pid, err)
		}
	})
	return p.err
}

// plural says "the backend" or "all 3 backends".
func plural(n int, noun string) string {
	if n == 1 {
		return "The " + noun
	}
	return fmt.Sprintf("All %d %ss", n, noun)
}
