package cli

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// dlockBin is the dlock binary built by TestMain for the end-to-end tests,
// as users build it: the command cmd/dlock (a module of its own, which
// go.work makes the clone's), which runs this package's Main with every
// driver, etcd's included.
var dlockBin string

// dlockPkg is the command the end-to-end tests build.
const dlockPkg = "github.com/dlock-go/dlock/cmd/dlock"

// dlockTags are dlockBin's build tags: "demo" when these tests are built
// with -tags demo (demo_test.go), as make test builds them.
var dlockTags string

// plainBin returns a dlock built without tags, as users build it, next to
// dlockBin.
var plainBin = sync.OnceValues(func() (string, error) {
	if dlockTags == "" {
		return dlockBin, nil
	}
	bin := filepath.Join(filepath.Dir(dlockBin), "dlock-plain")
	out, err := exec.Command("go", "build", "-o", bin, dlockPkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// TestMain builds the binary once, or, when the test binary is started as a
// command under dlock run (helperEnv set), plays that command.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode, os.Getenv(helperDirEnv)))
	}
	flag.Parse()
	dir, err := os.MkdirTemp("", "dlock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlockBin = filepath.Join(dir, "dlock")
	build := exec.Command("go", "build", "-tags", dlockTags, "-o", dlockBin, dlockPkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building dlock: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The helper command: the test binary, run by dlock run with helperEnv
// naming what to do and helperDirEnv a directory to report in.
const (
	helperEnv    = "DLOCK_E2E_HELPER"
	helperDirEnv = "DLOCK_E2E_DIR"
	// nestedBinEnv and nestedURLEnv tell the "nested" helper which dlock
	// to run, on which backend.
	nestedBinEnv = "DLOCK_E2E_BIN"
	nestedURLEnv = "DLOCK_E2E_URL"
)

// signalNames are the names of the signals the helper records.
var signalNames = map[syscall.Signal]string{
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGHUP: "SIGHUP",
	syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM",
}

// monoNow reads CLOCK_MONOTONIC, which all processes of a Linux machine
// share (unlike Go's monotonic readings, which are per process), and which
// wall-clock steps do not move.
func monoNow() int64 {
	const clockMonotonic = 1 // CLOCK_MONOTONIC in <time.h>
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(errno)
	}
	return ts.Nano()
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		panic(err)
	}
}

func helper(mode, dir string) int {
	key, token := os.Getenv("DLOCK_KEY"), os.Getenv("DLOCK_TOKEN")
	switch mode {
	case "interval":
		// The critical section: a marker created with O_EXCL (an overlap
		// if it exists) and the interval on the shared monotonic clock.
		start := monoNow()
		f, err := os.OpenFile(filepath.Join(dir, "inside"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			appendLine(filepath.Join(dir, "overlaps"), fmt.Sprintf("pid %d: %v", os.Getpid(), err))
		} else {
			f.Close()
		}
		time.Sleep(150 * time.Millisecond)
		os.Remove(filepath.Join(dir, "inside"))
		end := monoNow()
		appendLine(filepath.Join(dir, "intervals"), fmt.Sprintf("%s %s %d %d", key, token, start, end))
		return 0
	case "env":
		appendLine(filepath.Join(dir, "env"), "DLOCK_KEY="+key)
		appendLine(filepath.Join(dir, "env"), "DLOCK_TOKEN="+token)
		appendLine(filepath.Join(dir, "env"), "DLOCK_LEASE="+os.Getenv("DLOCK_LEASE"))
		if n, ok := os.LookupEnv("DLOCK_LIMIT"); ok {
			appendLine(filepath.Join(dir, "env"), "DLOCK_LIMIT="+n)
		} else {
			appendLine(filepath.Join(dir, "env"), "DLOCK_LIMIT unset")
		}
		return 0
	case "permit":
		return permitHelper(dir, key, token)
	case "ran":
		appendLine(filepath.Join(dir, "ran"), token)
		return 0
	case "nested":
		// dlock run of the same key, once, from inside the command (with
		// the environment dlock gave it): its exit status and the token
		// its own command saw.
		appendLine(filepath.Join(dir, "outer"), token+" "+os.Getenv("DLOCK_OWNER"))
		cmd := exec.Command(os.Getenv(nestedBinEnv), "run", "-url", os.Getenv(nestedURLEnv), "-wait", "0", key, "--", os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"=ran")
		cmd.Stderr = os.Stderr
		err := cmd.Run()
		appendLine(filepath.Join(dir, "nested"), fmt.Sprint(cmd.ProcessState.ExitCode(), " ", err))
		return 0
	case "hold", "term":
		// Hold until the test creates "release"; "term" records
		// DLOCK_TERM beside the token.
		if mode == "term" {
			token = os.Getenv("DLOCK_TERM") + " " + token
		}
		appendLine(filepath.Join(dir, "ready"), token)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
				return 0
			}
		}
		return 99
	case "trap", "ignore-term":
		// Record the signals that reach us; exit 3 on SIGTERM ("trap"), or
		// carry on ("ignore-term") until killed.
		c := make(chan os.Signal, 8)
		signal.Notify(c, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
		appendLine(filepath.Join(dir, "ready"), fmt.Sprint(os.Getpid()))
		timeout := time.After(time.Minute)
		for {
			select {
			case s := <-c:
				appendLine(filepath.Join(dir, "signals"), fmt.Sprintf("%s %d", signalNames[s.(syscall.Signal)], monoNow()))
				if s == syscall.SIGTERM && mode == "trap" {
					return 3
				}
			case <-timeout:
				return 98
			}
		}
	case "exit":
		n := 0
		fmt.Sscan(dir, &n)
		return n
	case "selfkill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return 97
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 96
}

// permitHelper is a command run under one of the DLOCK_LIMIT permits of
// key: it puts a marker file of its own in dir/inside and counts the
// markers there every few milliseconds while it runs, until it has seen
// the semaphore full (DLOCK_LIMIT markers, its own among them) and
// lingered a while more, or a few seconds passed: a command that runs
// beside too many others sees them. It appends to dir/permits: key,
// token, DLOCK_LIMIT, the most markers it saw, and its interval on the
// shared monotonic clock (inside its marker's life).
func permitHelper(dir, key, token string) int {
	limit, err := strconv.Atoi(os.Getenv("DLOCK_LIMIT"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "permit helper: DLOCK_LIMIT=%q: %v\n", os.Getenv("DLOCK_LIMIT"), err)
		return 95
	}
	inside := filepath.Join(dir, "inside")
	if err := os.MkdirAll(inside, 0o755); err != nil {
		panic(err)
	}
	marker := filepath.Join(inside, strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		panic(err)
	}
	start := monoNow()
	most := 0
	giveUp := time.Now().Add(3 * time.Second)
	var leave time.Time // once the semaphore was seen full
	for {
		es, err := os.ReadDir(inside)
		if err != nil {
			panic(err)
		}
		most = max(most, len(es))
		if leave.IsZero() && len(es) >= limit {
			leave = time.Now().Add(300 * time.Millisecond)
		}
		if now := time.Now(); (!leave.IsZero() && now.After(leave)) || now.After(giveUp) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	end := monoNow()
	os.Remove(marker)
	appendLine(filepath.Join(dir, "permits"), fmt.Sprintf("%s %s %d %d %d %d", key, token, limit, most, start, end))
	return 0
}

// dlockCmd is an exec.Cmd running dlock with args, whose command is this
// test binary in helper mode.
func dlockCmd(t *testing.T, mode, dir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(dlockBin, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDirEnv+"="+dir)
	// Wait returns soon after dlock exits even if a command it left behind
	// still holds the output pipe.
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// self is the path of the test binary, the helper command.
func self(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// result is how a dlock process ended.
type result struct {
	code   int
	stderr string
	took   time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v, stderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stderr)
}

// runDlock runs dlock to completion (at most a minute).
func runDlock(t *testing.T, mode, dir string, args ...string) result {
	t.Helper()
	cmd := dlockCmd(t, mode, dir, args...)
	return finish(t, cmd, start(t, cmd))
}

type started struct {
	at     time.Time
	stderr *lockedWriter
	done   chan struct{}
}

// lockedWriter collects a process's output, safe to read while written.
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func start(t *testing.T, cmd *exec.Cmd) *started {
	t.Helper()
	s := &started{stderr: &lockedWriter{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	s.at = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			cmd.Process.Kill()
		}
	})
	return s
}

func finish(t *testing.T, cmd *exec.Cmd, s *started) result {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case <-errc:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-errc
		t.Fatalf("dlock %v did not end within a minute; stderr:\n%s", cmd.Args[1:], s.stderr)
	}
	close(s.done)
	return result{code: cmd.ProcessState.ExitCode(), stderr: s.stderr.String(), took: time.Since(s.at)}
}

// waitFile waits up to timeout for path to exist and returns its content.
func waitFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", filepath.Base(path), timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
