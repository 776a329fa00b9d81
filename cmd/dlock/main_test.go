package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// buildCommand is how the README says to build dlock in a clone, at the
// repository's root (go.work makes every module of the clone the one
// built); TestMain builds it so (into a temporary directory).
const buildCommand = "go build -o dlock ./cmd/dlock"

// dlockBin is the dlock that TestMain built.
var dlockBin string

// Exit statuses of dlock (cmd/dlock's manual, "Exit status").
const (
	exitOK       = 0
	exitConflict = 1
	exitUsage    = 2
	exitBackend  = 125
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlock-etcd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlockBin = filepath.Join(dir, "dlock")
	build := exec.Command("go", "build", "-o", dlockBin, "./cmd/dlock")
	build.Dir = filepath.Join("..", "..") // the repository's root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", buildCommand, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is how a dlock process ended, with what it wrote.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// dlock runs dlock with args to its end (a minute at most).
func dlock(t *testing.T, args ...string) result {
	t.Helper()
	return run(t, dlockBin, args...)
}

// run runs the dlock bin with args to its end (a minute at most).
func run(t *testing.T, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	cmd.Wait()
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// TestBuildCommandDocumented: the README gives the command TestMain
// builds dlock with.
func TestBuildCommandDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), buildCommand) {
		t.Errorf("README.md does not say how to build this dlock in a clone: %q", buildCommand)
	}
}

// TestBackends: dlock version works, and dlock help lists every backend
// as compiled in: the main module's and etcd's.
func TestBackends(t *testing.T) {
	if r := dlock(t, "version"); r.code != exitOK || !strings.HasPrefix(r.stdout, "dlock ") {
		t.Errorf("dlock version: %v", r)
	}
	r := dlock(t, "help")
	line := regexp.MustCompile(`(?m)^Backends compiled in: (.*)\.$`).FindStringSubmatch(r.stdout)
	if r.code != exitOK || line == nil {
		t.Fatalf("dlock help: %v\nwant a line of the backends compiled in", r)
	}
	have := strings.Split(line[1], ", ")
	for _, s := range []string{"etcd", "memcached", "postgres", "redisnx", "rediswatch", "zookeeper"} {
		if !slices.Contains(have, s) {
			t.Errorf("dlock help: backends %v; want %s among them", have, s)
		}
	}
}

// TestEtcdMessages: the messages that name the network backends or guess
// one name etcd; the demo (-tags demo) tries etcd as one of its
// backends (rather than saying that the driver is missing). No server is needed.
func TestEtcdMessages(t *testing.T) {
	if r := dlock(t, "run", "-url", "memory://", "k", "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, ", etcd://") {
		t.Errorf("dlock run -url memory://: %v\nwant exit 2 and etcd:// among the network backends", r)
	}
	if r := dlock(t, "run", "-url", "127.0.0.1:2379", "k", "--", "true"); r.code != exitUsage || !strings.Contains(r.stderr, "did you mean etcd://127.0.0.1:2379?") {
		t.Errorf("dlock run -url 127.0.0.1:2379: %v\nwant exit 2 and etcd:// guessed", r)
	}
	// The demo is compiled in with -tags demo only (make demo).
	demo := filepath.Join(filepath.Dir(dlockBin), "dlock-demo")
	build := exec.Command("go", "build", "-tags", "demo", "-o", demo, "./cmd/dlock")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags demo ./cmd/dlock: %v\n%s", err, out)
	}
	if r := run(t, demo, "demo", "-url", "etcd://127.0.0.1:1"); r.code != exitBackend || !regexp.MustCompile(`etcd +etcd://127\.0\.0\.1:1 +.*connection refused`).MatchString(r.stdout) {
		t.Errorf("dlock demo -url etcd://...: %v\nwant exit 125 and etcd tried (connection refused), as a demo backend", r)
	}
}

// TestRunInspect: dlock run on a real etcd gives the command a fencing
// token; while one run holds the key, dlock run -n on it exits with the
// conflict status without running its command, and dlock inspect shows
// the holder with its token; once the holder is done, the key is free.
func TestRunInspect(t *testing.T) {
	e := testserver.StartEtcd(t, nil)
	url := "etcd://" + e.Addr() + "/dlock-cmd-test/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const key = "jobs/nightly"

	r := dlock(t, "run", "-url", url, key, "--", "sh", "-c", "echo $DLOCK_TOKEN")
	first, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
	if r.code != exitOK || err != nil || first == 0 {
		t.Fatalf("dlock run -- sh -c 'echo $DLOCK_TOKEN': %v\nwant exit 0 and a token above 0", r)
	}

	// The holder prints its token and holds the key while the file hold
	// exists.
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(dlockBin, "run", "-url", url, "-ttl", "10", key, "--",
		"sh", "-c", `echo $DLOCK_TOKEN; while [ -e "$1" ]; do sleep 0.05; done`, "sh", hold)
	var holderErr strings.Builder
	holder.Stderr = &holderErr
	pipe, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	lines, done := make(chan string, 1), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		done <- holder.Wait()
	}()
	ended := false
	t.Cleanup(func() {
		if !ended {
			holder.Process.Kill()
			<-done
		}
	})
	var held uint64
	select {
	case line := <-lines:
		held, err = strconv.ParseUint(line, 10, 64)
		if err != nil || held <= first {
			t.Fatalf("the holder's DLOCK_TOKEN %q; want a token above the first run's %d", line, first)
		}
	case err := <-done:
		ended = true
		t.Fatalf("the holder ended before its command printed its token: %v\nstderr:\n%s", err, holderErr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the holder's command printed no token within 30s; stderr:\n%s", holderErr.String())
	}

	// -n: fail at once, with -E's default status, the command not run.
	r = dlock(t, "run", "-url", url, "-n", key, "--", "sh", "-c", "echo ran")
	if r.code != exitConflict || r.stdout != "" || !strings.Contains(r.stderr, `dlock: not acquired: "jobs/nightly" is held on etcd://`) {
		t.Errorf("dlock run -n while the key is held: %v\nwant exit 1, the command not run, and why", r)
	}

	r = dlock(t, "inspect", "-url", url, key)
	holderLine := regexp.MustCompile(`(?m)^holder +exclusive +\S+ +` + strconv.FormatUint(held, 10) + ` +\S+ +\d{4}-`) // REMAINING is ? on etcd
	if r.code != exitOK || !strings.Contains(r.stdout, `"jobs/nightly" on etcd://`) || !strings.Contains(r.stdout, "held (1 holder); 0 waiters") || !holderLine.MatchString(r.stdout) {
		t.Errorf("dlock inspect of the held key: %v\nwant exit 0 and the holder with token %d", r, held)
	}
	r = dlock(t, "inspect", "-json", "-url", url, key)
	var st struct {
		Held    bool `json:"held"`
		Holders []struct {
			Token uint64 `json:"token"`
		} `json:"holders"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != exitOK || err != nil || !st.Held || len(st.Holders) != 1 || st.Holders[0].Token != held {
		t.Errorf("dlock inspect -json of the held key: %v (%v)\nwant the holder with token %d", r, err, held)
	}

	os.Remove(hold)
	select {
	case err := <-done:
		ended = true
		if err != nil {
			t.Errorf("the holder: %v\nstderr:\n%s", err, holderErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not end within 30s of its command's end")
	}
	if r := dlock(t, "inspect", "-url", url, key); r.code != exitConflict || !strings.Contains(r.stdout, "free; 0 waiters") {
		t.Errorf("dlock inspect once the holder is done: %v\nwant exit 1 and the key free", r)
	}
}
