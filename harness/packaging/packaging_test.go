// Package packaging checks what a user of dlock downloads: a throwaway
// module that imports dlock's packages must find in its go.sum only the
// modules those packages need, never the test harness's (testcontainers,
// moby, docker, the OpenTelemetry SDK, goleak); dlock's go.mod must require
// nothing that only its tests use, and declare the oldest Go it needs.
package packaging

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// forbidden are module path prefixes that only dlock's tests, harness and
// bench use; none may reach a user's go.sum.
var forbidden = []string{
	"github.com/testcontainers/",
	"github.com/moby/",
	"github.com/docker/",
	"github.com/containerd/",
	"github.com/opencontainers/",
	"go.uber.org/goleak",
	"go.opentelemetry.io/otel/sdk",
	"github.com/creack/pty",
	"github.com/bsm/redislock",
	"github.com/go-redsync/",
	"github.com/dlock-go/dlock/harness",
	"github.com/dlock-go/dlock/bench",
}

// root returns the main module's directory: this package is
// harness/packaging.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !strings.HasPrefix(string(b), "module github.com/dlock-go/dlock\n") {
		t.Fatalf("%s/go.mod is not dlock's main module (%v)", dir, err)
	}
	return dir
}

// goCmd runs the go command in dir with the module cache and proxy of
// this environment, outside any workspace, and returns its output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return goCmdEnv(t, dir, nil, args...)
}

// goCmdEnv is goCmd with env added to the environment.
func goCmdEnv(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, errb.String())
	}
	return out.String()
}

// consumer is a user's program: it imports the portable API and every
// driver, as a program that picks its backend by URL does.
const consumer = `package main

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/driver/memcached"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/driver/postgres"
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/driver/zookeeper"
	"github.com/dlock-go/dlock/lock"
)

var _ = []any{memcached.New, postgres.New, redisnx.New, rediswatch.New, zookeeper.Dial}

func main() {
	l := memory.New(memory.NewStore(), nil)
	defer l.Close()
	lease, err := l.Lock(context.Background(), "k")
	if err != nil {
		panic(err)
	}
	fmt.Println(lease.Token() > 0, lock.ErrHeld != nil)
}
`

// A throwaway module importing lock and the drivers: after go mod tidy its
// go.sum lists no module of dlock's test harness, and it builds.
func TestConsumerGoSum(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go build")
	}
	dlock := root(t)
	dir := t.TempDir()
	gomod := fmt.Sprintf("module example.com/consumer\n\ngo 1.24.0\n\nrequire github.com/dlock-go/dlock v0.0.0\n\nreplace github.com/dlock-go/dlock => %s\n", dlock)
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(consumer), 0o644))
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "build", "-o", filepath.Join(dir, "consumer"), ".")

	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	must(t, err)
	mods := sumModules(sum)
	if len(mods) == 0 {
		t.Fatalf("the consumer's go.sum is empty:\n%s", sum)
	}
	if bad := forbiddenIn(mods); len(bad) > 0 {
		t.Errorf("a user's go.sum lists modules only dlock's tests use: %v", bad)
	}
	t.Logf("a user's go.sum: %d lines, %d modules: %s", bytes.Count(sum, []byte("\n")), len(mods), strings.Join(mods, " "))
}

// dlock's go.mod requires only modules that provide packages to its
// non-test builds (the library, the CLI, with any of its build tags, on
// the systems users build for): a module its tests alone imported would be
// listed, and reach every user's go.sum.
func TestRequirementsAreBuildDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	dlock := root(t)
	used := map[string]bool{}
	for _, goos := range []string{"linux", "darwin", "windows", "freebsd"} {
		for _, tags := range []string{"", "demo"} {
			out := goCmdEnv(t, dlock, []string{"GOOS=" + goos, "CGO_ENABLED=0"},
				"list", "-tags", tags, "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")
			for _, m := range strings.Fields(out) {
				used[m] = true
			}
		}
	}
	req := requirements(t, filepath.Join(dlock, "go.mod"))
	var extra []string
	for _, m := range req {
		if !used[m] {
			extra = append(extra, m)
		}
	}
	if len(extra) > 0 {
		t.Errorf("go.mod requires modules no non-test package of dlock imports (only tests use them, yet every user's go.sum would list them): %v", extra)
	}
	if bad := forbiddenIn(req); len(bad) > 0 {
		t.Errorf("go.mod requires the harness's modules: %v", bad)
	}
}

// The go directive is the oldest Go the code and its dependencies need,
// not this machine's toolchain: below 1.26, and no toolchain line forces
// one on users. The same holds for the other published modules: the
// drivers that are modules of their own (driver/etcd) and the command.
func TestGoDirective(t *testing.T) {
	for _, gomod := range publishedModules {
		t.Run(gomod, func(t *testing.T) { checkGoDirective(t, filepath.Join(root(t), gomod)) })
	}
}

// publishedModules are the go.mod files of the modules users download:
// the main one, etcd's driver (a module of its own, so that only its
// users download etcd's client) and the dlock command, which has every
// driver. harness/ and bench/ are not published.
var publishedModules = []string{"go.mod", "driver/etcd/go.mod", "cmd/dlock/go.mod"}

func checkGoDirective(t *testing.T, gomod string) {
	b, err := os.ReadFile(gomod)
	must(t, err)
	var goLine string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goLine = strings.TrimSpace(v)
		}
		if strings.HasPrefix(l, "toolchain ") {
			t.Errorf("go.mod has %q: it makes every user's go command fetch that toolchain", l)
		}
	}
	parts := strings.SplitN(goLine, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("go.mod's go directive %q", goLine)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major != 1 || minor >= 26 {
		t.Errorf("%s says go %s; want a release below 1.26 (the oldest the code needs)", gomod, goLine)
	}
}

// The license users need before they adopt it, and the changelog.
func TestLicenseAndChangelog(t *testing.T) {
	for _, f := range []string{"LICENSE", "CHANGELOG.md"} {
		b, err := os.ReadFile(filepath.Join(root(t), f))
		if err != nil || len(b) < 100 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
}

// redisOnly is a user's program that imports one Redis driver.
const redisOnly = `package main

import (
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/redis/go-redis/v9"
)

func main() {
	l := redisnx.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), nil)
	l.Close()
}
`

// TestRedisOnlyConsumerGoSum: a program that imports only a Redis driver
// downloads no other driver's client: pgx (PostgreSQL), gomemcache and
// go-zookeeper reach its go.sum as go.mod lines only (module graph
// pruning needs those), never as module contents; etcd's client, whose
// driver is a module of its own, not even as go.mod lines.
func TestRedisOnlyConsumerGoSum(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go build")
	}
	dir := t.TempDir()
	gomod := fmt.Sprintf("module example.com/consumer\n\ngo 1.24.0\n\nrequire github.com/dlock-go/dlock v0.0.0\n\nreplace github.com/dlock-go/dlock => %s\n", root(t))
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(redisOnly), 0o644))
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "build", "-o", filepath.Join(dir, "consumer"), ".")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	must(t, err)
	sc := bufio.NewScanner(bytes.NewReader(sum))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && (strings.HasPrefix(f[0], "go.etcd.io/") || strings.HasPrefix(f[0], "github.com/dlock-go/dlock/driver/etcd")) {
			t.Errorf("a Redis-only program's go.sum has a line of %s %s: etcd's driver and client belong to their own module", f[0], f[1])
		}
		if len(f) != 3 || strings.HasSuffix(f[1], "/go.mod") {
			continue
		}
		for _, other := range []string{"github.com/jackc/", "github.com/bradfitz/gomemcache", "github.com/go-zookeeper/"} {
			if strings.HasPrefix(f[0], other) {
				t.Errorf("a Redis-only program's go.sum has the contents of %s %s: it would download another driver's client", f[0], f[1])
			}
		}
	}
}

// etcdOnly is a user's program that imports the etcd driver, a module of
// its own.
const etcdOnly = `package main

import (
	"github.com/dlock-go/dlock/driver/etcd"
	"github.com/dlock-go/dlock/lock"
)

func main() {
	l := etcd.New(nil, nil)
	l.Close()
	_ = lock.ErrHeld
}
`

// etcdClientOnly is a program that imports etcd's client alone: what it
// downloads is what any etcd user downloads.
const etcdClientOnly = `package main

import clientv3 "go.etcd.io/etcd/client/v3"

func main() { _, _ = clientv3.New(clientv3.Config{}) }
`

// TestEtcdConsumerGoSum: a program that imports the etcd driver's module
// builds, and its go.sum lists no module of dlock's test harness beyond
// those etcd's client brings itself (its dependencies' tests: goleak,
// the OpenTelemetry SDK), which a program importing the client alone
// lists too.
func TestEtcdConsumerGoSum(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go build")
	}
	dlock := root(t)
	gomod := fmt.Sprintf("module example.com/consumer\n\ngo 1.24.0\n\nrequire (\n\tgithub.com/dlock-go/dlock v0.0.0\n\tgithub.com/dlock-go/dlock/driver/etcd v0.0.0\n)\n\nreplace github.com/dlock-go/dlock => %s\n\nreplace github.com/dlock-go/dlock/driver/etcd => %s\n",
		dlock, filepath.Join(dlock, "driver", "etcd"))
	mods, lines := consumerSum(t, gomod, etcdOnly)
	if !slices.Contains(mods, "go.etcd.io/etcd/client/v3") {
		t.Errorf("the etcd consumer's go.sum lacks etcd's client: %v", mods)
	}
	client := required(t, filepath.Join(dlock, "driver", "etcd", "go.mod"), "go.etcd.io/etcd/client/v3")
	base, _ := consumerSum(t, "module example.com/etcdclient\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/client/v3 "+client+"\n", etcdClientOnly)
	var bad []string
	for _, m := range forbiddenIn(mods) {
		if !slices.Contains(base, m) {
			bad = append(bad, m)
		}
	}
	if len(bad) > 0 {
		t.Errorf("an etcd user's go.sum lists modules only dlock's tests use: %v", bad)
	}
	t.Logf("an etcd user's go.sum: %d lines, %d modules (etcd's client %s alone: %d modules)", lines, len(mods), client, len(base))
}

// consumerSum makes a throwaway module of gomod and main, tidies and
// builds it, and returns its go.sum's modules and line count.
func consumerSum(t *testing.T, gomod, main string) ([]string, int) {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "build", "-o", filepath.Join(dir, "consumer"), ".")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	must(t, err)
	return sumModules(sum), bytes.Count(sum, []byte("\n"))
}

// sumModules returns the module paths of go.sum's lines, sorted, once each.
func sumModules(sum []byte) []string {
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(sum))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 {
			mods = append(mods, f[0])
		}
	}
	slices.Sort(mods)
	return slices.Compact(mods)
}

// required returns the version of mod that gomod requires.
func required(t *testing.T, gomod, mod string) string {
	t.Helper()
	b, err := os.ReadFile(gomod)
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "require "))
		if len(f) >= 2 && f[0] == mod {
			return f[1]
		}
	}
	t.Fatalf("%s does not require %s", gomod, mod)
	return ""
}

// requirements returns the module paths go.mod requires.
func requirements(t *testing.T, gomod string) []string {
	t.Helper()
	b, err := os.ReadFile(gomod)
	must(t, err)
	var mods []string
	block := false
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "require (":
			block = true
		case block && l == ")":
			block = false
		case block && l != "" && !strings.HasPrefix(l, "//"):
			mods = append(mods, strings.Fields(l)[0])
		case strings.HasPrefix(l, "require "):
			mods = append(mods, strings.Fields(l)[1])
		}
	}
	return mods
}

func forbiddenIn(mods []string) []string {
	var bad []string
	for _, m := range mods {
		for _, p := range forbidden {
			if strings.HasPrefix(m, p) {
				bad = append(bad, m)
				break
			}
		}
	}
	return bad
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
