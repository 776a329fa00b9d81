// Package shipcheck checks that what ships carries no test machinery: a
// program that imports lock and a driver, and the dlock users install,
// compile none of internal/testsupport, nor testing, nor the demo; and
// that only test support imports testing outside _test.go files.
package shipcheck

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// shipped are the builds users get: each is go list's patterns, run in
// dir (a module's directory, so that a module of its own is listed by its
// own go.mod), with tags. An optional build's dir may be gone.
var shipped = []struct {
	name, dir string
	patterns  []string
	tags      string
	optional  bool
}{
	{"lock and the main module's drivers", ".", nil, "", false}, // nil: lock and driver/... (drivers())
	{"lock and etcd's driver", "driver/etcd", []string{"."}, "", false},
	{"the dlock command", "cmd/dlock", []string{"."}, "", false},
	// Gone once one dlock command carries every driver.
	{"the dlock command with etcd", "driver/etcd/cmd/dlock", []string{"."}, "", true},
}

// forbidden says why a package may not be in a shipped build, or "".
func forbidden(pkg string) string {
	switch {
	case pkg == "testing" || strings.HasPrefix(pkg, "testing/"):
		return "the standard library's test support"
	case strings.Contains(pkg, "/dlock/internal/testsupport/") || strings.HasSuffix(pkg, "/dlock/internal/testsupport"):
		return "test support"
	case strings.HasSuffix(pkg, "/dlock/driver/drivertest"):
		return "the drivers' conformance suite"
	case strings.HasPrefix(pkg, "github.com/dlock-go/dlock/harness"):
		return "the test harness"
	}
	return ""
}

// TestShippedDepsHaveNoTestSupport lists each shipped build's packages
// with go list -deps and fails on any forbidden one, naming the package
// that imports it.
func TestShippedDepsHaveNoTestSupport(t *testing.T) {
	for _, b := range shipped {
		if _, err := os.Stat(filepath.Join(root, b.dir)); err != nil && b.optional {
			t.Logf("%s: %s is gone", b.name, b.dir)
			continue
		} else if err != nil {
			t.Errorf("%s: %v (a build that moved or left: update shipped)", b.name, err)
			continue
		}
		patterns := b.patterns
		if patterns == nil {
			patterns = drivers(t)
		}
		imports := goList(t, b.dir, b.tags, patterns...)
		if len(imports) < 10 {
			t.Errorf("%s: go list -deps found only %d packages", b.name, len(imports))
		}
		for pkg, imps := range imports {
			for _, imp := range imps {
				if why := forbidden(imp); why != "" {
					t.Errorf("%s: %s imports %s (%s)", b.name, pkg, imp, why)
				}
			}
		}
	}
}

// TestCheckSeesTheDemo: the demo's build does carry test support (its
// -start-servers starts servers with internal/testsupport/testserver), so
// go list sees what the check above looks for.
func TestCheckSeesTheDemo(t *testing.T) {
	imports := goList(t, "cmd/dlock", "demo", ".")
	var found []string
	for _, imps := range imports {
		for _, imp := range imps {
			if forbidden(imp) != "" && !slices.Contains(found, imp) {
				found = append(found, imp)
			}
		}
	}
	if !slices.Contains(found, "testing") || !slices.Contains(found, "github.com/dlock-go/dlock/internal/testsupport/testserver") {
		t.Errorf("dlock built with -tags demo: forbidden packages %v; want testing and testserver among them", found)
	}
}

// TestDemoNotInDlock: internal/cli compiles none of the demo's files
// without the demo tag, and all of them with it.
func TestDemoNotInDlock(t *testing.T) {
	files := func(tags string) []string {
		out := run(t, ".", "go", "list", "-tags", tags, "-f", `{{join .GoFiles "\n"}}`, "./internal/cli")
		return strings.Fields(out)
	}
	var demo []string
	for _, f := range files("") {
		if strings.HasPrefix(f, "demo") && f != "demo_off.go" {
			demo = append(demo, f)
		}
	}
	if len(demo) > 0 {
		t.Errorf("dlock without -tags demo compiles the demo's files %v", demo)
	}
	with := files("demo")
	for _, f := range []string{"demo.go", "demo_worker.go", "demo_servers.go"} {
		if !slices.Contains(with, f) {
			t.Errorf("dlock with -tags demo does not compile %s (files: %v)", f, with)
		}
	}
	if slices.Contains(with, "demo_off.go") {
		t.Errorf("dlock with -tags demo compiles demo_off.go too")
	}
}

// testingAllowed are the files outside test support that may import
// testing without being _test.go files, and why.
var testingAllowed = map[string]string{
	"internal/cli/demo_servers.go": "the demo's servers, through testserver's testing.TB (build tag demo only)",
}

// TestOnlyTestSupportImportsTesting: outside _test.go files, only
// internal/testsupport, driver/drivertest (the public conformance suite)
// and the files of testingAllowed import testing. harness/ and bench/ are
// tooling modules of their own and are not walked.
func TestOnlyTestSupportImportsTesting(t *testing.T) {
	var bad []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".git" || rel == "harness" || rel == "bench" || d.Name() == "testdata",
				rel == "internal/testsupport", rel == "driver/drivertest":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || testingAllowed[rel] != "" {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "testing" || strings.HasPrefix(p, "testing/") {
				bad = append(bad, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("non-test files outside internal/testsupport and driver/drivertest import testing: %v", bad)
	}
}

// drivers returns lock and the main module's driver packages, all but
// the conformance suite: what a program with any of its drivers imports.
func drivers(t *testing.T) []string {
	t.Helper()
	pkgs := []string{"github.com/dlock-go/dlock/lock"}
	for _, p := range strings.Fields(run(t, ".", "go", "list", "./driver/...")) {
		if !strings.HasSuffix(p, "/drivertest") {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) < 7 {
		t.Fatalf("go list ./driver/... found %v", pkgs)
	}
	return pkgs
}

// goList returns each package of patterns' dependencies (run in dir, with
// tags) with its imports.
func goList(t *testing.T, dir, tags string, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-tags", tags, "-f", `{{.ImportPath}} {{join .Imports " "}}`}, patterns...)
	out := run(t, dir, "go", args...)
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	return imports
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join(root, dir)
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("%s %s (in %s): %s", name, strings.Join(args, " "), dir, msg)
	}
	return string(out)
}
