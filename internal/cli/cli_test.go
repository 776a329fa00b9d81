package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// serverURL is the URL of a Redis server for this test alone, started
// for it (the test is skipped with -short): dlock run refuses memory://,
// whose locks live in one process.
func serverURL(t *testing.T) string {
	t.Helper()
	return "redisnx://" + testserver.StartRedis(t, nil).Addr()
}

func TestRunEnvironment(t *testing.T) {
	url := serverURL(t)
	dir := t.TempDir()
	os.Setenv("DLOCK_TOKEN", "stale-from-outside") // replaced, not duplicated
	defer os.Unsetenv("DLOCK_TOKEN")
	r := runDlock(t, "env", dir, "run", "-url", url, "jobs/nightly", "--", self(t))
	if r.code != 0 {
		t.Fatal(r)
	}
	env := readFile(t, filepath.Join(dir, "env"))
	var (
		token  uint64
		handle string
	)
	if _, err := fmt.Sscanf(env, "DLOCK_KEY=jobs/nightly\nDLOCK_TOKEN=%d\nDLOCK_LEASE=%s\n", &token, &handle); err != nil || token == 0 {
		t.Fatalf("command's environment:\n%s\nwant DLOCK_KEY=jobs/nightly, a non-zero DLOCK_TOKEN and DLOCK_LEASE (%v)", env, err)
	}
	// The handle names the same grant: dlock1.x.OWNER.TOKEN.KEY.
	parts := strings.Split(handle, ".")
	if len(parts) != 5 || parts[0] != "dlock1" || parts[1] != "x" || parts[3] != fmt.Sprint(token) ||
		parts[4] != base64.RawURLEncoding.EncodeToString([]byte("jobs/nightly")) {
		t.Errorf("DLOCK_LEASE=%q; want the handle of the lease on jobs/nightly with token %d", handle, token)
	}
}

func TestRunExitStatus(t *testing.T) {
	url := serverURL(t) // the subtests run one by one: one key k at a time
	for _, tc := range []struct {
		name      string
		args      []string
		mode, arg string
		want      int
		stderr    string // a substring of dlock's stderr
	}{
		{"passthrough 0", []string{"k", "--", "SELF"}, "exit", "0", 0, ""},
		{"passthrough 7", []string{"k", "--", "SELF"}, "exit", "7", 7, ""},
		{"killed by signal", []string{"k", "--", "SELF"}, "selfkill", "", 128 + 9, ""},
		{"not found", []string{"k", "--", "no-such-command-dlock-test"}, "", "", exitNotFound, "dlock: "},
		{"not executable", []string{"k", "--", "NOEXEC"}, "", "", exitNoExec, "dlock: "},
		{"without --", []string{"k", "SELF"}, "exit", "7", 7, ""},
		{"flag after KEY", []string{"k", "-wait", "0", "SELF"}, "", "", exitUsage, "flags go before KEY"},
		{"missing command", []string{"k", "--"}, "", "", exitUsage, "missing COMMAND"},
		{"missing key", []string{"--", "true"}, "", "", exitUsage, "missing"},
		{"bad wait", []string{"-wait", "soon", "k", "--", "true"}, "", "", exitUsage, "forever"},
		{"bad -E", []string{"-E", "300", "k", "--", "true"}, "", "", exitUsage, "0 to 255"},
		{"bad log level", []string{"-log-level", "loud", "k", "--", "true"}, "", "", exitUsage, "log-level"},
		{"TTL out of range", []string{"-ttl", "1ms", "k", "--", "true"}, "", "", exitUsage, "TTL"},
		{"empty key", []string{"", "--", "true"}, "", "", exitUsage, "empty key"},
		{"unknown scheme", []string{"-url", "nosuch://x", "k", "--", "true"}, "", "", exitUsage, "unknown URL scheme"},
		{"no URL", []string{"-url", "", "k", "--", "true"}, "", "", exitUsage, "DLOCK_URL"},
		{"no scheme", []string{"-url", "127.0.0.1:6379", "k", "--", "true"}, "", "", exitUsage, "missing scheme: did you mean redisnx://127.0.0.1:6379? schemes: "},
		{"-n passthrough 7", []string{"-n", "2", "k", "--", "SELF"}, "exit", "7", 7, ""},
		{"-n 0", []string{"-n", "0", "k", "--", "true"}, "", "", exitUsage, "-n 0"},
		{"-n too large", []string{"-n", "100000", "k", "--", "true"}, "", "", exitUsage, "-n 100000: too many permits; want 1 to 65536 permits"},
		{"-limit not a number", []string{"-limit", "two", "k", "--", "true"}, "", "", exitUsage, "invalid value"},
		{"-n KEY: fail at once", []string{"-n", "two", "SELF"}, "exit", "5", 5, ""},
		{"-n without permits", []string{"-url", "memcached://127.0.0.1:1", "-n", "2", "k", "--", "true"}, "", "", exitUsage, "needs semaphore permits"},
		{"-n with -owner", []string{"-n", "2", "-owner", "me", "k", "--", "true"}, "", "", exitUsage, "-owner exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			noexec := filepath.Join(dir, "noexec")
			os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
			args := []string{"run", "-url", url}
			for _, a := range tc.args {
				a = strings.ReplaceAll(a, "SELF", self(t))
				args = append(args, strings.ReplaceAll(a, "NOEXEC", noexec))
			}
			mode := tc.mode
			if mode == "" {
				mode = "ran"
			}
			r := runDlock(t, mode, tc.arg, args...)
			if r.code != tc.want || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("dlock %v: %v\nwant exit %d and %q in stderr", args[1:], r, tc.want, tc.stderr)
			}
		})
	}
}

// TestRunDlockKilled: if dlock dies (SIGKILL), nothing renews the lease,
// so its command must die too (Linux: parent-death signal).
func TestRunDlockKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signals are Linux only")
	}
	dir := t.TempDir()
	cmd := dlockCmd(t, "trap", dir, "run", "-url", serverURL(t), "k", "--", self(t))
	s := start(t, cmd)
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "ready"), 15*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	finish(t, cmd, s)
	for deadline := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) outlived dlock by 5s", pid)
		}
	}
}

// TestRunNohup: a SIGHUP that dlock was started with ignored (nohup) stays
// ignored: it is not forwarded to the command.
func TestRunNohup(t *testing.T) {
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup here")
	}
	dir := t.TempDir()
	cmd := dlockCmd(t, "trap", dir, "run", "-url", serverURL(t), "k", "--", self(t))
	cmd.Path, cmd.Args = nohup, append([]string{"nohup"}, cmd.Args...) // nohup execs dlock: same pid
	s := start(t, cmd)
	waitFile(t, filepath.Join(dir, "ready"), 15*time.Second)
	cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	if r := finish(t, cmd, s); r.code != 3 {
		t.Fatalf("after SIGTERM: %v", r)
	}
	if got := strings.Fields(readFile(t, filepath.Join(dir, "signals"))); got[0] != "SIGTERM" || len(got) != 2 {
		t.Errorf("the command saw %v, want SIGTERM only", got)
	}
}

// alive reports whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// TestHelpOnStdout: help asked for (dlock -h, dlock help, dlock help
// CMD, dlock CMD -h) goes to stdout, so that | less shows it, and exits
// 0; nothing goes to stderr.
func TestHelpOnStdout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // on stdout
	}{
		{[]string{"-h"}, "Usage:\n  dlock run"},
		{[]string{"help"}, "Usage:\n  dlock run"},
		{[]string{"help", "run"}, "-conflict-exit-code"},
		{[]string{"run", "-h"}, "-conflict-exit-code"},
		{[]string{"run", "-help"}, "-conflict-exit-code"},
		{[]string{"help", "inspect"}, "-timeout"},
		{[]string{"inspect", "-h"}, "-timeout"},
		{[]string{"help"}, "\n  dlock schema [URL]"},
		{[]string{"help", "schema"}, "Usage: dlock schema [URL]"},
		{[]string{"schema", "-h"}, "Usage: dlock schema [URL]"},
	} {
		cmd := dlockCmd(t, "", "", tc.args...)
		stdout := &lockedWriter{}
		cmd.Stdout = stdout
		r := finish(t, cmd, start(t, cmd))
		if r.code != 0 || r.stderr != "" || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("dlock %q: %v\nstdout:\n%s\nwant exit 0, %q on stdout and nothing on stderr", tc.args, r, stdout, tc.want)
		}
	}
}

// TestUsageErrorsOneLine: a bad flag, value or command gets one line
// saying what is wrong and a line pointing at the help, on stderr, as
// every other usage error does: not the whole usage.
func TestUsageErrorsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the first line
	}{
		{[]string{"run", "-bogus", "k", "true"}, "dlock run: flag provided but not defined: -bogus"},
		{[]string{"run", "-ttl", "soon", "k", "true"}, `dlock run: invalid value "soon" for flag -ttl: want a duration such as 30s or 1m30s, or seconds`},
		{[]string{"run", "-limit", "-3", "-url", "redisnx://127.0.0.1:1", "k", "true"}, "dlock run: -limit -3: a number of permits cannot be negative; want 1 to 65536 permits"},
		{[]string{"run", "-limit", "two", "k", "true"}, `dlock run: invalid value "two" for flag -limit: parse error`},
		{[]string{"inspect", "-timeout", "x", "k"}, `dlock inspect: invalid value "x" for flag -timeout: want a duration`},
		{[]string{"frobnicate"}, `dlock: unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `dlock help: no command "frobnicate"`},
		{[]string{"schema", "-bogus"}, "dlock schema: flag provided but not defined: -bogus"},
	} {
		cmd := dlockCmd(t, "", "", tc.args...)
		stdout := &lockedWriter{}
		cmd.Stdout = stdout
		r := finish(t, cmd, start(t, cmd))
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if r.code != exitUsage || len(lines) != 2 || !strings.HasPrefix(lines[0], tc.want) ||
			!regexp.MustCompile(`^\(dlock( \w+ -h| help) for (help|the commands)\)$`).MatchString(lines[1]) || stdout.String() != "" {
			t.Errorf("dlock %q: %v\nstdout:\n%s\nwant exit 2 and two lines on stderr, the first starting %q, the second the hint", tc.args, r, stdout, tc.want)
		}
	}
	// With no arguments at all, the usage is the answer (on stderr, exit 2).
	if r := runDlock(t, "", ""); r.code != exitUsage || !strings.Contains(r.stderr, "dlock run") {
		t.Errorf("dlock: %v", r)
	}
}

// TestRunRefusesMemory: dlock run on memory://, from -url or $DLOCK_URL,
// is refused before the command runs: each dlock run is a process of its
// own, and memory:// locks only within one.
func TestRunRefusesMemory(t *testing.T) {
	for _, tc := range []struct{ env, url string }{{"", "memory://"}, {"memory://", ""}} {
		dir := t.TempDir()
		args := []string{"run", "k", "--", self(t)}
		if tc.url != "" {
			args = append([]string{"run", "-url", tc.url}, args[1:]...)
		}
		cmd := dlockCmd(t, "ran", dir, args...)
		cmd.Env = append(cmd.Env, "DLOCK_URL="+tc.env)
		r := finish(t, cmd, start(t, cmd))
		if r.code != exitUsage || !strings.Contains(r.stderr, "dlock run: memory:// keeps its locks inside one process, and every dlock run is a process of its own: a lock there would exclude nothing. Use a network backend: redisnx://") {
			t.Errorf("dlock %q with DLOCK_URL=%q: %v\nwant exit 2 and why memory:// is refused", args, tc.env, r)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Errorf("dlock %q with DLOCK_URL=%q ran the command", args, tc.env)
		}
	}
}

// TestVersion: dlock version, -version and --version print the module's
// version (devel in a checkout) and the Go version, on stdout.
func TestVersion(t *testing.T) {
	want := regexp.MustCompile(`^dlock (devel|v\d+\.\d+\.\d+\S*)( \([0-9a-f]{1,12}(, modified)?\))? ` + regexp.QuoteMeta(runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) + "\n$")
	for _, arg := range []string{"version", "-version", "--version"} {
		cmd := dlockCmd(t, "", "", arg)
		stdout := &lockedWriter{}
		cmd.Stdout = stdout
		r := finish(t, cmd, start(t, cmd))
		if r.code != 0 || !want.MatchString(stdout.String()) || r.stderr != "" {
			t.Errorf("dlock %s: %v\nstdout %q; want it to match %v", arg, r, stdout, want)
		}
	}
}

// memcachedFlush empties a memcached server with the text protocol.
func memcachedFlush(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("flush_all\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "OK" {
		return fmt.Errorf("flush_all: %q", line)
	}
	return nil
}

// TestDemoNotBuiltIn: the dlock users build has no demo, and dlock demo
// says how to get one that has it.
func TestDemoNotBuiltIn(t *testing.T) {
	bin, err := plainBin()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"demo"}, {"help", "demo"}, {demoWorkerCmd}} {
		cmd := dlockCmd(t, "", "", args...)
		cmd.Path, cmd.Args[0] = bin, bin
		r := finish(t, cmd, start(t, cmd))
		if r.code != exitUsage || r.stderr != demoMissing {
			t.Errorf("dlock %q: %v\nwant exit 2 and on stderr:\n%s", args, r, demoMissing)
		}
	}
}
