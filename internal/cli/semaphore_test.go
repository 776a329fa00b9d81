package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// dlock run -n: the permits of a semaphore instead of the lock.

// permitRun is what one command run under a permit reported (the
// "permit" helper): its key, token and DLOCK_LIMIT, the most commands it
// saw inside at once (itself among them), and its interval on the shared
// monotonic clock.
type permitRun struct {
	key         string
	token       uint64
	limit, most int
	start, end  int64
}

func readPermitRuns(t *testing.T, dir string) []permitRun {
	t.Helper()
	var runs []permitRun
	for _, line := range strings.Split(strings.TrimSpace(readOptional(filepath.Join(dir, "permits"))), "\n") {
		if line == "" {
			continue
		}
		var r permitRun
		if _, err := fmt.Sscan(line, &r.key, &r.token, &r.limit, &r.most, &r.start, &r.end); err != nil {
			t.Fatalf("bad permits line %q: %v", line, err)
		}
		runs = append(runs, r)
	}
	return runs
}

// atOnce returns the most runs whose intervals overlap at one moment, and
// the most commands one of them saw inside at once.
func atOnce(runs []permitRun) (overlap, seen int) {
	type edge struct {
		at    int64
		delta int
	}
	var es []edge
	for _, r := range runs {
		es = append(es, edge{r.start, +1}, edge{r.end, -1})
		seen = max(seen, r.most)
	}
	// Ends before starts at one moment: touching intervals do not overlap.
	slices.SortFunc(es, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta
	})
	n := 0
	for _, e := range es {
		n += e.delta
		overlap = max(overlap, n)
	}
	return overlap, seen
}

// checkPermitRuns checks the reports of runs commands run under -n limit
// on key: all ran, each with DLOCK_LIMIT and a token of its own, never
// more than limit at once (by their intervals and by what they saw), and
// limit at once at some point.
func checkPermitRuns(t *testing.T, dir, key string, limit, runs int) {
	t.Helper()
	got := readPermitRuns(t, dir)
	if len(got) != runs {
		t.Fatalf("%d commands ran, want %d", len(got), runs)
	}
	tokens := map[uint64]bool{}
	for _, r := range got {
		if r.key != key || r.limit != limit || r.token == 0 || tokens[r.token] {
			t.Errorf("a command ran with key %q, DLOCK_LIMIT %d, token %d; want key %q, DLOCK_LIMIT %d and a token of its own", r.key, r.limit, r.token, key, limit)
		}
		tokens[r.token] = true
	}
	overlap, seen := atOnce(got)
	t.Logf("%d commands under -n %d: at most %d at once by their intervals, %d seen by one of them", runs, limit, overlap, seen)
	if overlap > limit || seen > limit {
		t.Errorf("more than %d commands ran at once: %d by their intervals, %d seen by one of them: %+v", limit, overlap, seen, got)
	}
	if overlap < limit || seen < limit {
		t.Errorf("never %d commands at once: %d by their intervals, %d seen by one of them: %+v", limit, overlap, seen, got)
	}
}

// TestRunSemaphore runs four dlock run -n 2 processes on one key at once,
// on each network backend whose Locker grants permits (a subtest each):
// at most two of their commands may run at once, and two must have. It
// fails when no backend grants permits: the flag would then be checked
// across processes nowhere (memory:// is per process).
func TestRunSemaphore(t *testing.T) {
	if testing.Short() {
		t.Skip("needs servers")
	}
	var (
		mu      sync.Mutex
		checked []string
		refused []string
	)
	for _, scheme := range []string{"redisnx", "rediswatch", "zookeeper"} {
		t.Run(scheme, func(t *testing.T) {
			if !slices.Contains(lock.Schemes(), scheme) {
				t.Skipf("%s is not compiled into dlock", scheme)
			}
			var url string
			if scheme == "zookeeper" {
				url = "zookeeper://" + testserver.StartZooKeeper(t, nil).Addr() + "/dlock-e2e?session_timeout=4s"
			} else {
				url = scheme + "://" + testserver.StartRedis(t, nil).Addr()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lk, err := lock.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			err = lk.Supports(lock.Permits)
			lk.Close()
			if err != nil {
				mu.Lock()
				refused = append(refused, fmt.Sprintf("%s: %v", scheme, err))
				mu.Unlock()
				t.Skipf("%s grants no permits: %v", scheme, err)
			}
			mu.Lock()
			checked = append(checked, scheme)
			mu.Unlock()

			dir := t.TempDir()
			const runs, limit = 4, 2
			var wg sync.WaitGroup
			results := make([]result, runs)
			for i := range runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = runDlock(t, "permit", dir, "run", "-url", url, "-n", fmt.Sprint(limit), "-ttl", "10s", "sem", "--", self(t))
				}()
			}
			wg.Wait()
			for i, r := range results {
				if r.code != 0 {
					t.Errorf("dlock %d: %v", i, r)
				}
			}
			checkPermitRuns(t, dir, "sem", limit, runs)
		})
	}
	if len(checked) == 0 {
		t.Fatalf("no network backend grants semaphore permits in this build (%s): dlock run -n is checked across processes nowhere", strings.Join(refused, "; "))
	}
}

// runInProcess is dlock run's path for one command, in this process:
// parse, acquire, run the command with the environment run gives it, and
// release. Its Lockers over memory:// share the process's Store, so that
// runs of it exclude each other as dlock processes on a server do.
func runInProcess(t *testing.T, mode, dir string, args ...string) error {
	cfg, err := parseRun(args, io.Discard)
	if err != nil {
		return err
	}
	a := cfg.acquire(context.Background(), time.Now())
	if a.lease == nil {
		return fmt.Errorf("exit %d: %s", a.code, a.msg)
	}
	defer cfg.release(a.locker, a.lease)
	cmd := exec.Command(cfg.argv[0], cfg.argv[1:]...)
	cmd.Env = append(childEnv(a.lease, cfg.owner, false), helperEnv+"="+mode, helperDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd.Run()
}

// TestRunSemaphoreInProcess is TestRunSemaphore's scenario and checks on
// memory://, with the runs in this process (runInProcess) and their
// commands as processes: it needs no server, and checks the scenario
// where no network backend grants permits.
func TestRunSemaphoreInProcess(t *testing.T) {
	dir := t.TempDir()
	key := "sem/" + t.Name()
	const runs, limit = 4, 2
	var wg sync.WaitGroup
	errs := make([]error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runInProcess(t, "permit", dir, "-url", "memory://", "-n", fmt.Sprint(limit), key, "--", self(t))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
	checkPermitRuns(t, dir, key, limit, runs)
}

// TestRunSemaphoreCheckCatches shows that the checks of TestRunSemaphore
// can fail: dlock run -n 2 processes on one Redis server, each with a
// key prefix of its own (so nothing excludes them), run all at once, and
// the commands must see it.
func TestRunSemaphoreCheckCatches(t *testing.T) {
	url := serverURL(t)
	dir := t.TempDir()
	const runs = 5
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := runDlock(t, "permit", dir, "run", "-url", fmt.Sprintf("%s?prefix=p%d", url, i), "-n", "2", "sem", "--", self(t)); r.code != 0 {
				t.Errorf("dlock: %v", r)
			}
		}()
	}
	wg.Wait()
	got := readPermitRuns(t, dir)
	if len(got) != runs {
		t.Fatalf("%d commands ran, want %d", len(got), runs)
	}
	overlap, seen := atOnce(got)
	t.Logf("%d commands under -n 2 on unrelated stores: %d at once by their intervals, %d seen by one of them", runs, overlap, seen)
	if overlap <= 2 || seen <= 2 {
		t.Errorf("%d commands on unrelated stores: %d at once by their intervals, %d seen by one of them; want more than 2 by both", runs, overlap, seen)
	}
}

// TestRunPermitQueue checks, on memory:// in this process, what the
// manual (cmd/dlock's package doc) says of -n and plain locks of one key:
// they exclude each other and wait in one queue, in arrival order (-n 1
// included); a run whose -n differs from the key's running permits' exits
// 2; -wait 0 takes a free permit, and exits 1 when there is none.
func TestRunPermitQueue(t *testing.T) {
	key := "queue/" + t.Name()
	ctx := context.Background()
	lk, err := lock.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	var store *memory.Store
	if !lk.As(&store) {
		t.Fatal("no memory Store")
	}
	waitEntries := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(store.Entries(key)) != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("key %q has %d holders and waiters, want %d", key, len(store.Entries(key)), n)
			}
		}
	}
	type run struct {
		cfg *runConfig
		c   chan acquired
		a   acquired
	}
	begin := func(args ...string) *run {
		t.Helper()
		cfg, err := parseRun(append(append([]string{"-url", "memory://"}, args...), key, "--", "true"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		r := &run{cfg: cfg, c: make(chan acquired, 1)}
		go func() { r.c <- cfg.acquire(ctx, time.Now()) }()
		return r
	}
	granted := func(r *run, what string) {
		t.Helper()
		select {
		case r.a = <-r.c:
			if r.a.lease == nil {
				t.Fatalf("%s: exit %d: %s", what, r.a.code, r.a.msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not granted within 5s", what)
		}
	}
	waiting := func(r *run, what string) {
		t.Helper()
		select {
		case r.a = <-r.c:
			t.Fatalf("%s: got %v (exit %d %s) while it should wait", what, r.a.lease != nil, r.a.code, r.a.msg)
		case <-time.After(200 * time.Millisecond):
		}
	}
	release := func(r *run) { r.cfg.release(r.a.locker, r.a.lease) }

	// A lock holds; -n 1, then a plain lock, wait: -n 1 first.
	l1 := begin()
	granted(l1, "the first lock")
	p := begin("-n", "1")
	waitEntries(2)
	l2 := begin()
	waitEntries(3)
	waiting(p, "-n 1 while a lock holds the key")
	release(l1)
	granted(p, "-n 1 after the lock was released")
	waiting(l2, "a lock while -n 1 holds the key")
	release(p)
	granted(l2, "the lock that came after -n 1")
	release(l2)
	waitEntries(0)

	// A permit of 2 holds; a lock waits; a later -n 2 waits behind it,
	// although a permit is free.
	p1 := begin("-n", "2")
	granted(p1, "-n 2 on a free key")
	l := begin()
	waitEntries(2)
	p2 := begin("-n", "2")
	waitEntries(3)
	waiting(l, "a lock while a permit holds the key")
	waiting(p2, "-n 2 behind a waiting lock")
	release(p1)
	granted(l, "the lock after the permit was released")
	waiting(p2, "-n 2 while a lock holds the key")
	release(l)
	granted(p2, "-n 2 after the lock")

	// p2 holds one of 2 permits: -n 3 is refused, -wait 0 -n 2 gets the
	// other permit, and then finds none.
	m := begin("-n", "3", "-wait", "0")
	if m.a = <-m.c; m.a.lease != nil || m.a.code != exitUsage || !strings.Contains(m.a.msg, "2") {
		t.Errorf("-n 3 while permits of 2 run: exit %d %q, want %d naming the key's 2 permits", m.a.code, m.a.msg, exitUsage)
	}
	p3 := begin("-n", "2", "-wait", "0")
	granted(p3, "-wait 0 -n 2 with a permit free")
	for _, args := range [][]string{{"-n", "2", "-wait", "0"}, {"-wait", "0"}} {
		a := begin(args...)
		a.a = <-a.c
		if a.a.lease != nil || a.a.code != exitConflict {
			t.Errorf("%v with both permits taken: exit %d %q, want %d", args, a.a.code, a.a.msg, exitConflict)
		}
	}
	release(p2)
	release(p3)
	waitEntries(0)
}

// TestRunPermitEnvironment: a command under -n gets DLOCK_LIMIT and a
// permit's handle; under a plain lock, DLOCK_LIMIT is removed.
func TestRunPermitEnvironment(t *testing.T) {
	url := serverURL(t)
	t.Setenv("DLOCK_LIMIT", "stale-from-outside")
	for _, tc := range []struct {
		args        []string
		limit, mode string
	}{
		{[]string{"-n", "3"}, "DLOCK_LIMIT=3", "p3"},
		{[]string{"-n", "1"}, "DLOCK_LIMIT=1", "p1"},
		{nil, "DLOCK_LIMIT unset", "x"},
	} {
		dir := t.TempDir()
		args := append(append([]string{"run", "-url", url}, tc.args...), "jobs/k", "--", self(t))
		if r := runDlock(t, "env", dir, args...); r.code != 0 {
			t.Fatalf("%v: %v", tc.args, r)
		}
		lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "env"))), "\n")
		if len(lines) != 4 || lines[3] != tc.limit {
			t.Errorf("%v: the command's environment %q, want %s last", tc.args, lines, tc.limit)
			continue
		}
		if parts := strings.Split(strings.TrimPrefix(lines[2], "DLOCK_LEASE="), "."); len(parts) != 5 || parts[1] != tc.mode {
			t.Errorf("%v: %s, want a handle of mode %s", tc.args, lines[2], tc.mode)
		}
	}
}
