package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/harness/modproxy"
)

// releaseVersion is the version TestReleaseInstall tags in its throwaway
// repository.
const releaseVersion = "v0.0.1-test"

// published are dlock's published modules: path and directory.
var published = []struct{ path, dir string }{
	{"github.com/dlock-go/dlock", ""},
	{"github.com/dlock-go/dlock/driver/etcd", "driver/etcd"},
	{"github.com/dlock-go/dlock/cmd/dlock", "cmd/dlock"},
}

// releaseConsumer is a user's program on the library and the etcd driver
// of a release.
const releaseConsumer = `package main

import (
	"context"
	"fmt"
	"strings"

	_ "github.com/dlock-go/dlock/driver/etcd"
	_ "github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

func main() {
	ctx := context.Background()
	l, err := lock.Open(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	lease, err := l.Lock(ctx, "k")
	if err != nil {
		panic(err)
	}
	fmt.Printf("token %d schemes %s\n", lease.Token(), strings.Join(lock.Schemes(), ","))
}
`

// TestReleaseInstall: the release path, without the network. In a
// throwaway repository made of the working tree, scripts/release.sh tags
// a test version of the three published modules; from those tags a module
// proxy of files is built; then, outside any workspace (GOWORK=off), with
// an empty GOPATH, dlock's modules from that proxy only and the others from
// the module cache's downloads (or the usual proxy):
//   - go install github.com/dlock-go/dlock/cmd/dlock@VERSION works, the
//     installed dlock lists every backend, etcd's included, says VERSION,
//     and go version -m shows dlock's three modules at VERSION;
//   - a program of its own go gets the library and the etcd driver at
//     VERSION, builds and runs.
func TestReleaseInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the release script and go install")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	start := time.Now()
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repo")
	copyWorkTree(t, root(t), repo)
	git(t, repo, "init", "-q")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "the working tree")

	// The module cache: fresh, and writable so that t.TempDir can remove
	// it. The release script fills it; dlock's own modules are then taken
	// out of it, so that the installs below get them from this test's proxy.
	cache := filepath.Join(tmp, "modcache")
	script := exec.Command("bash", "scripts/release.sh", releaseVersion)
	script.Dir = repo
	script.Env = append(gitEnv(), "DLOCK_RELEASE_GOMODCACHE="+cache)
	out, err := script.CombinedOutput()
	t.Logf("scripts/release.sh %s (%s):\n%s", releaseVersion, time.Since(start).Round(time.Second), tail(string(out), 12))
	if err != nil {
		t.Fatalf("scripts/release.sh %s: %v", releaseVersion, err)
	}
	for _, m := range published {
		tag := strings.TrimPrefix(m.dir+"/"+releaseVersion, "/")
		gomod := git(t, repo, "show", tag+":"+strings.TrimPrefix(m.dir+"/go.mod", "/"))
		if strings.Contains(gomod, "\nreplace") {
			t.Errorf("%s's go.mod at %s has a replace directive:\n%s", m.path, tag, gomod)
		}
	}
	if !strings.Contains(string(out), "git push origin ") {
		t.Errorf("scripts/release.sh printed no push command")
	}
	for _, d := range []string{"github.com/dlock-go", "cache/download/github.com/dlock-go"} {
		if err := os.RemoveAll(filepath.Join(cache, d)); err != nil {
			t.Fatal(err)
		}
	}

	proxy := filepath.Join(tmp, "proxy")
	for _, m := range published {
		if err := modproxy.Add(proxy, repo, m.path, m.dir, releaseVersion); err != nil {
			t.Fatal(err)
		}
	}
	sharedCache := strings.TrimSpace(goCmd(t, tmp, "env", "GOMODCACHE"))
	upstream := strings.TrimSpace(goCmd(t, tmp, "env", "GOPROXY"))
	env := []string{
		"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-modcacherw",
		"GOPROXY=file://" + proxy + ",file://" + filepath.Join(sharedCache, "cache", "download") + "," + upstream,
		"GONOSUMDB=github.com/dlock-go",
		"GOPATH=" + filepath.Join(tmp, "gopath"), "GOMODCACHE=" + cache, "GOBIN=" + filepath.Join(tmp, "bin"),
	}
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}

	// The command.
	outside := filepath.Join(tmp, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	run(outside, "install", "github.com/dlock-go/dlock/cmd/dlock@"+releaseVersion)
	bin := filepath.Join(tmp, "bin", "dlock")
	help, err := exec.Command(bin, "help").Output()
	must(t, err)
	line := regexp.MustCompile(`(?m)^Backends compiled in: (.*)\.$`).FindSubmatch(help)
	if line == nil {
		t.Fatalf("dlock help: no line of the backends compiled in:\n%s", help)
	}
	have := strings.Split(string(line[1]), ", ")
	for _, s := range []string{"etcd", "memcached", "memory", "postgres", "redisnx", "rediswatch", "zookeeper"} {
		if !slices.Contains(have, s) {
			t.Errorf("the installed dlock's backends %v lack %s", have, s)
		}
	}
	version, err := exec.Command(bin, "version").Output()
	must(t, err)
	if !strings.HasPrefix(string(version), "dlock "+releaseVersion+" ") {
		t.Errorf("dlock version: %q; want dlock %s", version, releaseVersion)
	}
	checkBuildInfo(t, run(outside, "version", "-m", bin), published[0].path, published[1].path, published[2].path)

	// A user's program.
	user := filepath.Join(tmp, "user")
	must(t, os.MkdirAll(user, 0o755))
	must(t, os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/user\n\ngo 1.24.0\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(user, "main.go"), []byte(releaseConsumer), 0o644))
	run(user, "get", published[0].path+"@"+releaseVersion, published[1].path+"@"+releaseVersion)
	run(user, "mod", "tidy")
	prog := filepath.Join(user, "user")
	run(user, "build", "-o", prog, ".")
	got, err := exec.Command(prog).CombinedOutput()
	if err != nil || !regexp.MustCompile(`^token [1-9][0-9]* schemes .*\betcd\b`).Match(got) || !strings.Contains(string(got), "memory") {
		t.Errorf("the user's program: %v\n%s\nwant a token and the etcd and memory schemes", err, got)
	}
	checkBuildInfo(t, run(user, "version", "-m", prog), published[0].path, published[1].path)
	t.Logf("released, installed and built from the tags in %s", time.Since(start).Round(time.Second))
}

// checkBuildInfo checks go version -m's output: each of mods is the
// binary's main module or a dependency, at releaseVersion with a checksum
// (downloaded, not a directory of the clone), and none is replaced.
func checkBuildInfo(t *testing.T, info string, mods ...string) {
	t.Helper()
	for _, m := range mods {
		re := regexp.MustCompile(`(?m)^\s+(mod|dep)\s+` + regexp.QuoteMeta(m) + `\s+(\S+)\s+(\S*)$`)
		f := re.FindStringSubmatch(info)
		if f == nil || f[2] != releaseVersion || !strings.HasPrefix(f[3], "h1:") {
			t.Errorf("go version -m: %s is not at %s with a checksum:\n%s", m, releaseVersion, info)
		}
	}
	if strings.Contains(info, "=>") {
		t.Errorf("go version -m: a module is replaced:\n%s", info)
	}
}

// copyWorkTree copies the files git knows in src (tracked, and untracked
// but not ignored) to dst: the working tree as it is, changes included.
func copyWorkTree(t *testing.T, src, dst string) {
	t.Helper()
	for _, f := range strings.Split(git(t, src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"), "\x00") {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		must(t, err)
		fi, err := os.Stat(filepath.Join(src, f))
		must(t, err)
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755))
		must(t, os.WriteFile(filepath.Join(dst, f), b, fi.Mode().Perm()))
	}
}

// gitEnv is the environment with a git identity for commits and tags.
func gitEnv() []string {
	return append(os.Environ(),
		"GIT_AUTHOR_NAME=dlock release test", "GIT_AUTHOR_EMAIL=release-test@example.com",
		"GIT_COMMITTER_NAME=dlock release test", "GIT_COMMITTER_EMAIL=release-test@example.com")
}

// git runs git in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if e, ok := err.(*exec.ExitError); ok {
			stderr = e.Stderr
		}
		t.Fatalf("git %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return string(out)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
