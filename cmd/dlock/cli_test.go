package main

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
)

// These tests run the built binary against memory://, which needs no
// server (and excludes nothing across processes), so they run with -short.

func TestRunEnvironment(t *testing.T) {
	dir := t.TempDir()
	os.Setenv("DLOCK_TOKEN", "stale-from-outside") // replaced, not duplicated
	defer os.Unsetenv("DLOCK_TOKEN")
	r := runDlock(t, "env", dir, "run", "-url", "memory://", "jobs/nightly", "--", self(t))
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
		{"-n too large", []string{"-n", "100000", "k", "--", "true"}, "", "", exitUsage, "from 1 to"},
		{"-limit not a number", []string{"-limit", "two", "k", "--", "true"}, "", "", exitUsage, "invalid value"},
		{"-n KEY: fail at once", []string{"-n", "two", "SELF"}, "exit", "5", 5, ""},
		{"-n without permits", []string{"-url", "memcached://127.0.0.1:1", "-n", "2", "k", "--", "true"}, "", "", exitUsage, "needs semaphore permits"},
		{"-n with -owner", []string{"-n", "2", "-owner", "me", "k", "--", "true"}, "", "", exitUsage, "-owner exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			noexec := filepath.Join(dir, "noexec")
			os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
			args := []string{"run", "-url", "memory://"}
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
	cmd := dlockCmd(t, "trap", dir, "run", "-url", "memory://", "k", "--", self(t))
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
	cmd := dlockCmd(t, "trap", dir, "run", "-url", "memory://", "k", "--", self(t))
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

func TestHelpAndUnknownCommand(t *testing.T) {
	if r := runDlock(t, "", "", "help"); r.code != 0 {
		t.Errorf("dlock help: %v", r)
	}
	if r := runDlock(t, "", "", "run", "-h"); r.code != 0 || !strings.Contains(r.stderr, "-conflict-exit-code") {
		t.Errorf("dlock run -h: %v", r)
	}
	if r := runDlock(t, "", "", "frobnicate"); r.code != exitUsage {
		t.Errorf("dlock frobnicate: %v", r)
	}
	if r := runDlock(t, "", ""); r.code != exitUsage {
		t.Errorf("dlock: %v", r)
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
