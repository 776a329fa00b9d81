package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Every server gets a directory under one per-process base directory,
// $TMPDIR/dlock-testserver-<pid>. Cleanups remove each server's directory;
// if the test binary died before its cleanups ran, the next binary using
// this package removes base directories whose process is gone.

const basePrefix = "dlock-testserver-"

var base struct {
	once sync.Once
	dir  string
	err  error
}

func baseDir() (string, error) {
	base.once.Do(func() {
		sweepStaleDirs()
		base.dir = filepath.Join(os.TempDir(), basePrefix+strconv.Itoa(os.Getpid()))
		base.err = os.MkdirAll(base.dir, 0o755)
	})
	return base.dir, base.err
}

func removeBaseDir() {
	if base.dir != "" {
		os.RemoveAll(base.dir)
	}
}

func sweepStaleDirs() {
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), basePrefix))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), basePrefix) || err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			dir := filepath.Join(os.TempDir(), e.Name())
			// A server's process that outlived the binary (PostgreSQL's
			// children, SIGSTOPped by a Pause when the binary died, never
			// see their postmaster die) still works in the directory.
			for _, p := range processesUnder(dir) {
				syscall.Kill(p, syscall.SIGKILL)
			}
			os.RemoveAll(dir)
		}
	}
}

// newWorkDir makes a fresh directory for one server or group and registers
// its removal with lt.
func newWorkDir(lt Lifetime, name string) (string, error) {
	b, err := baseDir()
	if err != nil {
		return "", fmt.Errorf("testserver: %w", err)
	}
	dir, err := os.MkdirTemp(b, name+"-")
	if err != nil {
		return "", fmt.Errorf("testserver: %w", err)
	}
	lt.Cleanup(func() { os.RemoveAll(dir) })
	return dir, nil
}

// launch starts p and registers its teardown with lt: the process is killed
// when lt ends, and if the test failed its log tail is logged first.
// Register it after newWorkDir so the process dies before its directory is
// removed (cleanups run last-in first-out).
func launch(lt Lifetime, p *process) error {
	lt.Cleanup(func() {
		p.Kill()
		if f, ok := lt.(interface{ Failed() bool }); ok && f.Failed() {
			lt.Logf("testserver: %s log tail (%s):\n%s", p.name, p.logPath, p.logTail(1500))
		}
	})
	return p.start()
}

func mkdirAll(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testserver: %w", err)
	}
	return dir, nil
}
