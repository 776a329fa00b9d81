package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtcdNotCompiledIn: cmd/dlock has no etcd driver (etcd's client is a
// module of its own). An etcd:// URL, from -url or $DLOCK_URL, is a usage
// error that says so and how to get the dlock that has it, before any
// command runs; dlock inspect says the same (the demo: TestDemoEtcdNotCompiledIn).
func TestEtcdNotCompiledIn(t *testing.T) {
	const (
		url     = "etcd://u:s3cret@127.0.0.1:2379/app"
		why     = "this dlock has no etcd backend: etcd's client is a Go module of its own, which this build leaves out."
		install = "go install github.com/dlock-go/dlock/driver/etcd/cmd/dlock@latest"
		build   = "cd driver/etcd && go build -o dlock ./cmd/dlock"
	)
	check := func(what string, r result) {
		t.Helper()
		for _, want := range []string{why, install, build, `"etcd://u:xxxxx@127.0.0.1:2379/app"`} {
			if r.code != exitUsage || !strings.Contains(r.stderr, want) {
				t.Errorf("%s: %v\nwant exit 2 and %q on stderr", what, r, want)
			}
		}
		if strings.Contains(r.stderr, "s3cret") || strings.Contains(r.stderr, "is the driver package imported") {
			t.Errorf("%s: stderr shows the password or lock.Open's advice to a program:\n%s", what, r.stderr)
		}
	}
	for _, tc := range []struct{ env, url string }{{"", url}, {url, ""}} {
		dir := t.TempDir()
		args := []string{"run", "k", "--", self(t)}
		if tc.url != "" {
			args = append([]string{"run", "-url", tc.url}, args[1:]...)
		}
		cmd := dlockCmd(t, "ran", dir, args...)
		cmd.Env = append(cmd.Env, "DLOCK_URL="+tc.env)
		check("dlock run", finish(t, cmd, start(t, cmd)))
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Errorf("dlock %q with DLOCK_URL=%q ran the command", args, tc.env)
		}
	}
	r, out := inspectDlock(t, "-url", url, "k")
	check("dlock inspect", r)
	if out != "" {
		t.Errorf("dlock inspect wrote to stdout:\n%s", out)
	}
}
