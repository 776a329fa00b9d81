package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestList: the listing names the public packages' identifiers with their
// signatures, and leaves out tests, unexported names and main packages.
func TestList(t *testing.T) {
	lines, err := list("../..")
	if err != nil {
		t.Fatal(err)
	}
	all := "\n" + strings.Join(lines, "\n") + "\n"
	for _, want := range []string{
		"\nlock: func Open(ctx context.Context, ",
		"\nlock: const DefaultTTL = 30 * time.Second\n",
		"\ndriver/etcd: ",
		"\ndriver/drivertest: func Run(",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the listing has no line starting %q", strings.TrimPrefix(want, "\n"))
		}
	}
	for _, bad := range []string{"Test", "internal/", "cmd/dlock", ": func newLocker"} {
		for _, l := range lines {
			if strings.Contains(l, bad) {
				t.Errorf("the listing has %q: %s", bad, l)
			}
		}
	}
}

// TestCompare: a recorded listing that differs fails, naming the lines
// and the command that updates it.
func TestCompare(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api.txt")
	if err := os.WriteFile(file, []byte("a: x\na: y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := compare(file, []string{"a: x", "a: y"}); err != nil {
		t.Errorf("same lines: %v", err)
	}
	err := compare(file, []string{"a: x", "a: z"})
	if err == nil {
		t.Fatal("a changed line passed")
	}
	for _, want := range []string{"- a: y", "+ a: z", "make api"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
