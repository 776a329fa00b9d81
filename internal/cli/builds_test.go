package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// noEtcdBin returns a dlock built without etcd's driver
// (testdata/noetcd), with dlockBin's tags, next to it.
var noEtcdBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(dlockBin), "dlock-noetcd")
	out, err := exec.Command("go", "build", "-tags", dlockTags, "-o", bin, "github.com/dlock-go/dlock/internal/cli/testdata/noetcd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build testdata/noetcd: %v\n%s", err, out)
	}
	return bin, nil
})

// noEtcdCmd is dlockCmd with the dlock of noEtcdBin.
func noEtcdCmd(t *testing.T, mode, dir string, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := noEtcdBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := dlockCmd(t, mode, dir, args...)
	cmd.Path, cmd.Args[0] = bin, bin
	return cmd
}

// TestEtcdNotCompiledIn: a build without etcd's driver (the package's
// own, in process or testdata/noetcd) takes an etcd:// URL, from -url
// or $DLOCK_URL, for a usage error that says so and how to get the dlock
// command, which has it, before any command runs; dlock inspect says the
// same (the demo: TestDemoEtcdNotCompiledIn). The dlock command itself
// has etcd: it tries the URL.
func TestEtcdNotCompiledIn(t *testing.T) {
	const (
		url     = "etcd://u:s3cret@127.0.0.1:2379/app"
		why     = "this dlock has no etcd backend: etcd's client is a Go module of its own, which this build leaves out."
		install = "go install github.com/dlock-go/dlock/cmd/dlock@latest"
		build   = "go build -o dlock ./cmd/dlock"
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
		cmd := noEtcdCmd(t, "ran", dir, args...)
		cmd.Env = append(cmd.Env, "DLOCK_URL="+tc.env)
		check("dlock run", finish(t, cmd, start(t, cmd)))
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Errorf("dlock %q with DLOCK_URL=%q ran the command", args, tc.env)
		}
	}
	cmd := noEtcdCmd(t, "", "", "inspect", "-url", url, "k")
	stdout := &lockedWriter{}
	cmd.Stdout = stdout
	check("dlock inspect", finish(t, cmd, start(t, cmd)))
	if stdout.String() != "" {
		t.Errorf("dlock inspect wrote to stdout:\n%s", stdout)
	}

	// The dlock command tries the URL: nothing listens there.
	if r, _ := inspectDlock(t, "-timeout", "3s", "-url", "etcd://127.0.0.1:1/app", "k"); r.code != exitBackend || strings.Contains(r.stderr, why) {
		t.Errorf("dlock inspect -url etcd://127.0.0.1:1/app: %v\nwant exit 125: the dlock command has etcd", r)
	}
}
