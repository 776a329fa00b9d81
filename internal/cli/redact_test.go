package cli

import (
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestScrubbing: the scrubber hides the secrets of the URLs it was
// given where they stand as secrets (in a URL, after a secret
// parameter's name), and argURLs finds the -url values.
func TestScrubbing(t *testing.T) {
	var b strings.Builder
	w := scrubbing(&b, "redisnx://u:secret@h", "zookeeper://a:b%21c@h", "redisnx://s?master_name=m&password=p%2Bw")
	w.Write([]byte("redisnx://u:secret@h zookeeper://a:b!c@h a:b%21c@h, password=p+w&x password=p%2Bw secretly\n"))
	if got := b.String(); got != "redisnx://u:xxxxx@h zookeeper://a:xxxxx@h a:xxxxx@h, password=xxxxx&x password=xxxxx secretly\n" {
		t.Errorf("scrubbed %q", got)
	}
	if args := argURLs([]string{"-url", "a", "--url=b", "-wait", "0", "-url=c", "k", "--", "x", "-url"}); !slices.Equal(args, []string{"a", "b", "c"}) {
		t.Errorf("argURLs = %q", args)
	}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestSecretsNeverPrinted: the password of the backend URL, from -url or
// $DLOCK_URL, appears in no output of dlock: help, usage errors, failed
// runs, debug logs (the client libraries' messages included).
func TestSecretsNeverPrinted(t *testing.T) {
	down := closedAddr(t)
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "u", Password: "right"})
	type run struct {
		name string
		env  string // DLOCK_URL
		args []string
	}
	runs := []run{
		{"run -h", "redisnx://u:secret@127.0.0.1:1", []string{"run", "-h"}},
		{"help run", "redisnx://u:secret@127.0.0.1:1", []string{"help", "run"}},
		{"usage error", "redisnx://u:secret@127.0.0.1:1", []string{"run", "-bogus", "k", "--", "true"}},
		{"malformed", "", []string{"run", "-url", "redisnx://u:secret@[::1", "k", "--", "true"}},
		{"malformed in env", "redisnx://u:secret@h:1:2:3/x", []string{"run", "-log-level", "debug", "k", "--", "true"}},
		{"no scheme", "", []string{"run", "-url", "u:secret@127.0.0.1:6379", "k", "--", "true"}},
		{"zookeeper down", "", []string{"run", "-url", "zookeeper://u:secret@" + down, "-wait", "0", "-log-level", "debug", "k", "--", "true"}},
		{"Sentinel password= down", "", []string{"run", "-url", "redisnx://" + down + "?master_name=m&password=secret", "-wait", "0", "-log-level", "debug", "k", "--", "true"}},
		{"inspect Sentinel password= down", "", []string{"inspect", "-url", "rediswatch://" + down + "?master_name=m&password=secret", "-log-level", "debug", "k"}},
		{"inspect password= invalid", "redisnx://" + down + "?password=secret&bogus=1", []string{"inspect", "k"}},
		{"inspect -h", "redisnx://" + down + "?master_name=m&password=secret", []string{"inspect", "-h"}},
	}
	for _, s := range []string{"redisnx", "rediswatch"} {
		for _, wait := range []string{"0", "1s"} {
			runs = append(runs,
				run{s + " refused -wait " + wait, s + "://u:secret@" + down, []string{"run", "-wait", wait, "-log-level", "debug", "k", "--", "true"}},
				run{s + " wrong password -wait " + wait, "", []string{"run", "-url", s + "://u:secret@" + srv.Addr(), "-wait", wait, "-log-level", "debug", "k", "--", "true"}})
		}
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			cmd := dlockCmd(t, "ran", t.TempDir(), r.args...)
			cmd.Env = append(cmd.Env, "DLOCK_URL="+r.env)
			stdout := &lockedWriter{}
			cmd.Stdout = stdout
			res := finish(t, cmd, start(t, cmd))
			out := stdout.String() + res.stderr
			if strings.Contains(out, "secret") {
				t.Errorf("dlock %q printed the password:\n%s", r.args, out)
			}
			if r.name != "run -h" && r.name != "help run" && r.name != "inspect -h" && res.code == 0 {
				t.Errorf("dlock %q succeeded: %v", r.args, res)
			}
			if out == "" {
				t.Errorf("dlock %q printed nothing", r.args)
			}
		})
	}
}

// TestRunHelpHidesPassword: dlock run -h prints no password by itself,
// before the scrubber that cmdRun puts around stderr: -url's default is
// not $DLOCK_URL's value, and the help shows that value redacted.
func TestRunHelpHidesPassword(t *testing.T) {
	t.Setenv("DLOCK_URL", "redisnx://u:secret@127.0.0.1:1")
	var b strings.Builder
	_, err := parseRun([]string{"-h"}, io.Discard)
	var h *helpErr
	if !errors.As(err, &h) {
		t.Fatalf("parseRun(-h): %v; want a *helpErr", err)
	}
	h.print(&b)
	if help := b.String(); strings.Contains(help, "secret") || !strings.Contains(help, "redisnx://u:xxxxx@127.0.0.1:1") {
		t.Errorf("dlock run -h printed:\n%s\nwant the URL redacted", help)
	}
}
