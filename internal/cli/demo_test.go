//go:build demo

package cli

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestDemoStartServers runs what make demo runs, shorter: every compiled-in
// network backend must get a table row with grants, no overlaps and
// monotonic tokens, and the fencing scene's two lines, the server paused
// (checkFencingLines); the servers the demo started must be gone after it.
// Only a server that is not installed here (testserver cannot have one,
// and the demo says "not installed") may go without a row; one that is
// installed and fails to start fails the test.
func TestDemoStartServers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the demo starts real servers")
	}
	cmd := dlockCmd(t, "", "", "demo", "-start-servers", "-duration", "800ms", "-workers", "3", "-keys", "2")
	out := &lockedWriter{}
	cmd.Stdout = out
	r := finish(t, cmd, start(t, cmd))
	text := out.String()
	if r.code != 0 {
		t.Fatalf("%v\nstdout:\n%s", r, text)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 9 {
			rows[f[0]] = f
		}
	}
	for _, b := range compiledIn() {
		row, ok := rows[b.scheme]
		if !ok {
			missing := testserver.Available(testserver.Kind(b.server))
			if missing != nil && strings.Contains(text, string(b.server)+" not installed") {
				t.Logf("%s skipped: its server is not installed here (%v)", b.scheme, missing)
				continue
			}
			t.Errorf("no table row for %s (its server installed: %v) in:\n%s", b.scheme, missing == nil, text)
			continue
		}
		// backend grants grants/s overlaps tokens p50 p99 lost errors
		if row[1] == "0" || row[3] != "0" || row[4] != "monotonic" || row[7] != "0" || row[8] != "0" {
			t.Errorf("%s: %v", b.scheme, row)
		}
	}
	checkFencingLines(t, text, true)
	if strings.Contains(text, "failed to start") {
		t.Errorf("a server failed to start:\n%s", text)
	}
	if !strings.Contains(text, "no overlapping grants") {
		t.Errorf("no verdict in:\n%s", text)
	}
	for _, m := range regexp.MustCompile(`started \w+ +on (\S+)`).FindAllStringSubmatch(text, -1) {
		if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
			c.Close()
			t.Errorf("a server the demo started still answers on %s", m[1])
		}
	}
}

// TestDemoDeletedGrant runs the demo on servers it did not start (-url):
// it cannot pause them, so it deletes A's grant with the backend's own
// client instead, in each driver's layout; A must still see the loss
// (Done) and the resource refuse its late write.
func TestDemoDeletedGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the demo needs real servers")
	}
	args := []string{"demo", "-duration", "500ms", "-workers", "2", "-keys", "1"}
	for _, b := range compiledIn() {
		var s startedServer
		switch b.server {
		case serverRedis:
			s.addrs = testserver.StartRedis(t, nil).Addrs()
		case serverMemcached:
			s.addrs = testserver.StartMemcached(t, nil).Addrs()
		case serverZooKeeper:
			s.addrs = testserver.StartZooKeeper(t, nil).Addrs()
		case serverPostgres:
			s.url = testserver.StartPostgres(t, nil).URL()
		case serverEtcd:
			s.addrs = testserver.StartEtcd(t, nil).Addrs()
		default:
			t.Fatalf("no server for %s", b.scheme)
		}
		args = append(args, "-url", b.urlFor(s))
	}
	cmd := dlockCmd(t, "", "", args...)
	out := &lockedWriter{}
	cmd.Stdout = out
	r := finish(t, cmd, start(t, cmd))
	if r.code != 0 {
		t.Fatalf("%v\nstdout:\n%s", r, out)
	}
	text := out.String()
	for _, b := range compiledIn() { // every server was started: each has its row
		if !regexp.MustCompile(`(?m)^` + b.scheme + ` +\d+ +\d+ +0 +monotonic`).MatchString(text) {
			t.Errorf("no table row for %s in:\n%s", b.scheme, text)
		}
	}
	checkFencingLines(t, text, false)
}

// The fencing scene's two lines of one backend (see scene.lines).
var (
	lostLine  = regexp.MustCompile(`(?m)^(\S+) +A holds token (\d+), (server paused \(SIGSTOP\) [\d.]+m?s|its grant deleted \([\w ]+\)): (A's Done at|B granted at) ([\d.]+)s, (B granted at|A's Done at) ([\d.]+)s$`)
	fenceLine = regexp.MustCompile(`(?m)^(\S+) +B writes with token (\d+): accepted; A, late, with (\d+): refused$`)
)

// checkFencingLines checks that every compiled-in backend with a table
// row in the demo's output has its fencing scene's lines, and that they
// say what must be: A's lease lost to the fault (a pause if paused, else
// a deletion) and its Done fired, before B's grant when the server was
// paused; B's token above A's; B's write accepted and A's, with A's
// token, refused.
func checkFencingLines(t *testing.T, text string, paused bool) {
	t.Helper()
	lost, fenced := map[string][]string{}, map[string][]string{}
	for _, m := range lostLine.FindAllStringSubmatch(text, -1) {
		lost[m[1]] = m
	}
	for _, m := range fenceLine.FindAllStringSubmatch(text, -1) {
		fenced[m[1]] = m
	}
	for _, b := range compiledIn() {
		if !regexp.MustCompile(`(?m)^` + b.scheme + ` +\d+ +\d+ +0 +monotonic`).MatchString(text) {
			continue // no row: its server is not installed (TestDemoStartServers says)
		}
		l, f := lost[b.scheme], fenced[b.scheme]
		if l == nil || f == nil {
			t.Errorf("%s: no fencing scene lines (lease lost, fencing) in:\n%s", b.scheme, text)
			continue
		}
		times := map[string]float64{}
		for _, i := range []int{4, 6} {
			times[l[i]], _ = strconv.ParseFloat(l[i+1], 64)
		}
		done, granted := times["A's Done at"], times["B granted at"]
		tokenA, _ := strconv.ParseUint(l[2], 10, 64)
		tokenB, _ := strconv.ParseUint(f[2], 10, 64)
		switch {
		case strings.HasPrefix(l[3], "server paused") != paused:
			t.Errorf("%s: %q; want the server paused: %v", b.scheme, l[0], paused)
		case paused && done >= granted:
			t.Errorf("%s: %q: A's Done did not fire before B was granted", b.scheme, l[0])
		case tokenB <= tokenA || f[3] != l[2]:
			t.Errorf("%s: %q then %q: want B's token above A's, and A's late write with A's token", b.scheme, l[0], f[0])
		}
	}
}

// TestDemoPostgresNotInstalledOrFailed: with -start-servers, a PostgreSQL
// whose programs are not there is reported as not installed, and one
// whose programs are there but fail as failing to start, with their
// message. The other servers are named by address variables at a port
// where nothing listens, and the docker provider has no helper, so nothing
// but PostgreSQL is started and the demo ends at once, with no backend.
func TestDemoPostgresNotInstalledOrFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the demo binary")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	// The failing programs: PostgreSQL's run as user postgres when the test
	// runs as root, so their directory must be open to it.
	broken, err := os.MkdirTemp("", "dlock-demo-pgbin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(broken) })
	if err := os.Chmod(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"initdb", "postgres", "pg_basebackup", "psql"} {
		script := "#!/bin/sh\necho \"" + prog + ": broken on purpose\" >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(broken, prog), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, binDir  string
		want, notWant string
	}{
		{"not installed", t.TempDir(), "postgres not installed: ", "postgres failed to start"},
		{"failed to start", broken, "postgres failed to start: ", "postgres not installed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := dlockCmd(t, "", "", "demo", "-start-servers", "-duration", "300ms")
			cmd.Env = append(cmd.Env,
				testserver.EnvBackend+"=", testserver.EnvPostgresURL+"=",
				testserver.EnvRedisAddr+"="+closed, testserver.EnvMemcachedAddr+"="+closed,
				testserver.EnvZooKeeperAddr+"="+closed, testserver.EnvEtcdAddr+"="+closed,
				testserver.EnvContainersHelper+"="+filepath.Join(c.binDir, "no-such-helper"),
				testserver.EnvPostgresBinDir+"="+c.binDir)
			out := &lockedWriter{}
			cmd.Stdout = out
			finish(t, cmd, start(t, cmd))
			text := out.String()
			if !strings.Contains(text, c.want) || strings.Contains(text, c.notWant) {
				t.Errorf("want %q and not %q in:\n%s", c.want, c.notWant, text)
			}
			if c.binDir == broken && !strings.Contains(text, "broken on purpose") {
				t.Errorf("the failure's message is not shown in:\n%s", text)
			}
			if strings.Contains(text, "not installed: not installed") {
				t.Errorf("said twice:\n%s", text)
			}
			if !strings.Contains(text, "No backend is reachable") {
				t.Errorf("a backend answered:\n%s", text)
			}
		})
	}
}

// TestDemoBackendOf: postgresql:// is the postgres backend, and a host
// without a port is probed on its scheme's standard port.
func TestDemoBackendOf(t *testing.T) {
	for _, s := range []string{"postgres", "postgresql"} {
		if b, ok := backendOf(s); !ok || b.scheme != "postgres" || b.server != serverPostgres {
			t.Errorf("backendOf(%q) = %v, %v", s, b.scheme, ok)
		}
	}
	if _, ok := backendOf("memory"); ok {
		t.Error("memory is a network backend")
	}
	for _, c := range [][3]string{
		{"postgres", "db", "db:5432"},
		{"postgresql", "[::1]", "[::1]:5432"},
		{"redisnx", "cache", "cache:6379"},
		{"zookeeper", "zk", "zk:2181"},
		{"nosuch", "h", "h"},
	} {
		if got := withDefaultPort(c[0], c[1]); got != c[2] {
			t.Errorf("withDefaultPort(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

// init builds the end-to-end tests' dlock with the demo, as make demo
// does: this file is compiled only with -tags demo, as make test runs
// these tests.
func init() { dlockTags = "demo" }

// TestDemoHelpAndUsage: the demo's help goes to stdout, and a bad flag
// gets one line on stderr, as every command's.
func TestDemoHelpAndUsage(t *testing.T) {
	for _, args := range [][]string{{"help", "demo"}, {"demo", "-h"}} {
		cmd := dlockCmd(t, "", "", args...)
		stdout := &lockedWriter{}
		cmd.Stdout = stdout
		r := finish(t, cmd, start(t, cmd))
		if r.code != 0 || r.stderr != "" || !strings.Contains(stdout.String(), "-start-servers") {
			t.Errorf("dlock %q: %v\nstdout:\n%s\nwant exit 0 and the demo's flags on stdout", args, r, stdout)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "-bogus"}, "dlock demo: flag provided but not defined: -bogus"},
		{[]string{"demo", "-duration", "soon"}, `dlock demo: invalid value "soon" for flag -duration`},
	} {
		r := runDlock(t, "", "", tc.args...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, tc.want) {
			t.Errorf("dlock %q: %v\nwant exit 2 and a first line %q", tc.args, r, tc.want)
		}
	}
}

// TestDemoEtcdNotCompiledIn: the demo of a dlock without etcd's driver
// (testdata/noetcd) leaves an etcd:// URL out, with a pointer to the dlock
// command, which has it.
func TestDemoEtcdNotCompiledIn(t *testing.T) {
	const url = "etcd://u:s3cret@127.0.0.1:2379/app"
	cmd := noEtcdCmd(t, "", "", "demo", "-url", url)
	stdout := &lockedWriter{}
	cmd.Stdout = stdout
	r := finish(t, cmd, start(t, cmd))
	if want := "left out: this dlock has no etcd backend (github.com/dlock-go/dlock/cmd/dlock has it)"; r.code != exitBackend || !strings.Contains(stdout.String(), want) {
		t.Errorf("dlock demo: %v\nstdout:\n%s\nwant exit 125 and %q", r, stdout, want)
	}
}

// TestDemoNoBackend: with nothing reachable the demo says how to start
// servers and exits 125.
func TestDemoNoBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cmd := dlockCmd(t, "", "", "demo", "-url", "memory://", "-url", schemeForDemoTest()+"://"+addr)
	out := &lockedWriter{}
	cmd.Stdout = out
	r := finish(t, cmd, start(t, cmd))
	if r.code != exitBackend || !strings.Contains(out.String(), "-start-servers") || !strings.Contains(out.String(), "memory://") {
		t.Errorf("%v\nstdout:\n%s", r, out)
	}
}

func schemeForDemoTest() string {
	for _, b := range compiledIn() {
		return b.scheme
	}
	return "redisnx"
}

// TestResource checks the demo's overlap and stale-token detector, with
// two handles on one file as two worker processes have.
func TestResource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r")
	a, err := openResource(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openResource(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	step := func(r *resource, token uint64, wantOverlap, wantStale bool) {
		t.Helper()
		overlap, stale, err := r.enter(token)
		if err != nil || overlap != wantOverlap || stale != wantStale {
			t.Fatalf("enter(%d) = overlap %v, stale %v, %v; want %v, %v", token, overlap, stale, err, wantOverlap, wantStale)
		}
	}
	step(a, 5, false, false)
	a.leave(5)
	step(b, 7, false, false) // in turn, increasing: fine
	step(a, 9, true, false)  // b is still inside: an overlap
	b.leave(7)               // not the latest holder: a stays inside
	if inside, highest, _ := a.state(); !inside || highest != 9 {
		t.Fatalf("state = %v, %d; want inside, 9", inside, highest)
	}
	a.leave(9)
	step(b, 8, false, true) // below 9: stale
	b.leave(8)
	step(a, 9, false, true) // equal: stale too
	a.leave(9)
	if inside, _, _ := a.state(); inside {
		t.Fatalf("still inside after everyone left")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	if p := percentile(ds, 50); p != 50 {
		t.Errorf("p50 = %d", p)
	}
	if p := percentile(ds, 99); p != 99 {
		t.Errorf("p99 = %d", p)
	}
	if p := percentile(ds[:1], 99); p != 1 {
		t.Errorf("p99 of one = %d", p)
	}
	if p := percentile(nil, 50); p != 0 {
		t.Errorf("p50 of none = %d", p)
	}
}
