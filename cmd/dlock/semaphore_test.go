package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// dlock run -n: the permits of a semaphore instead of the lock.

// TestRunPermitQueue checks, on memory:// in this process, what the
// package doc says of -n and plain locks of one key: they exclude each
// other and wait in one queue, in arrival order (-n 1 included); a run
// whose -n differs from the key's running permits' exits 2; -wait 0 takes
// a free permit, and exits 1 when there is none.
func TestRunPermitQueue(t *testing.T) {
	key := "queue/" + t.Name()
	ctx := context.Background()
	lk, err := lock.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	var store *memory.Store
	if !lock.As(lk, &store) {
		t.Fatal("no memory Store")
	}
	waitEntries := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(store.Entries(key)) != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("key %q has %d holders and waiters, want %d", key, len(store.Entries(key)), n)
			}
		}
	}
	type run struct {
		cfg *runConfig
		c   chan acquired
		a   acquired
	}
	begin := func(args ...string) *run {
		t.Helper()
		cfg, err := parseRun(append(append([]string{"-url", "memory://"}, args...), key, "--", "true"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		r := &run{cfg: cfg, c: make(chan acquired, 1)}
		go func() { r.c <- cfg.acquire(ctx) }()
		return r
	}
	granted := func(r *run, what string) {
		t.Helper()
		select {
		case r.a = <-r.c:
			if r.a.lease == nil {
				t.Fatalf("%s: exit %d: %s", what, r.a.code, r.a.msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not granted within 5s", what)
		}
	}
	waiting := func(r *run, what string) {
		t.Helper()
		select {
		case r.a = <-r.c:
			t.Fatalf("%s: got %v (exit %d %s) while it should wait", what, r.a.lease != nil, r.a.code, r.a.msg)
		case <-time.After(200 * time.Millisecond):
		}
	}
	release := func(r *run) { r.cfg.release(r.a.locker, r.a.lease) }

	// A lock holds; -n 1, then a plain lock, wait: -n 1 first.
	l1 := begin()
	granted(l1, "the first lock")
	p := begin("-n", "1")
	waitEntries(2)
	l2 := begin()
	waitEntries(3)
	waiting(p, "-n 1 while a lock holds the key")
	release(l1)
	granted(p, "-n 1 after the lock was released")
	waiting(l2, "a lock while -n 1 holds the key")
	release(p)
	granted(l2, "the lock that came after -n 1")
	release(l2)
	waitEntries(0)

	// A permit of 2 holds; a lock waits; a later -n 2 waits behind it,
	// although a permit is free.
	p1 := begin("-n", "2")
	granted(p1, "-n 2 on a free key")
	l := begin()
	waitEntries(2)
	p2 := begin("-n", "2")
	waitEntries(3)
	waiting(l, "a lock while a permit holds the key")
	waiting(p2, "-n 2 behind a waiting lock")
	release(p1)
	granted(l, "the lock after the permit was released")
	waiting(p2, "-n 2 while a lock holds the key")
	release(l)
	granted(p2, "-n 2 after the lock")

	// p2 holds one of 2 permits: -n 3 is refused, -wait 0 -n 2 gets the
	// other permit, and then finds none.
	m := begin("-n", "3", "-wait", "0")
	if m.a = <-m.c; m.a.lease != nil || m.a.code != exitUsage || !strings.Contains(m.a.msg, "2") {
		t.Errorf("-n 3 while permits of 2 run: exit %d %q, want %d naming the key's 2 permits", m.a.code, m.a.msg, exitUsage)
	}
	p3 := begin("-n", "2", "-wait", "0")
	granted(p3, "-wait 0 -n 2 with a permit free")
	for _, args := range [][]string{{"-n", "2", "-wait", "0"}, {"-wait", "0"}} {
		a := begin(args...)
		a.a = <-a.c
		if a.a.lease != nil || a.a.code != exitConflict {
			t.Errorf("%v with both permits taken: exit %d %q, want %d", args, a.a.code, a.a.msg, exitConflict)
		}
	}
	release(p2)
	release(p3)
	waitEntries(0)
}

// TestRunPermitEnvironment: a command under -n gets DLOCK_LIMIT and a
// permit's handle; under a plain lock, DLOCK_LIMIT is removed.
func TestRunPermitEnvironment(t *testing.T) {
	t.Setenv("DLOCK_LIMIT", "stale-from-outside")
	for _, tc := range []struct {
		args        []string
		limit, mode string
	}{
		{[]string{"-n", "3"}, "DLOCK_LIMIT=3", "p3"},
		{[]string{"-n", "1"}, "DLOCK_LIMIT=1", "p1"},
		{nil, "DLOCK_LIMIT unset", "x"},
	} {
		dir := t.TempDir()
		args := append(append([]string{"run", "-url", "memory://"}, tc.args...), "jobs/k", "--", self(t))
		if r := runDlock(t, "env", dir, args...); r.code != 0 {
			t.Fatalf("%v: %v", tc.args, r)
		}
		lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "env"))), "\n")
		if len(lines) != 4 || lines[3] != tc.limit {
			t.Errorf("%v: the command's environment %q, want %s last", tc.args, lines, tc.limit)
			continue
		}
		if parts := strings.Split(strings.TrimPrefix(lines[2], "DLOCK_LEASE="), "."); len(parts) != 5 || parts[1] != tc.mode {
			t.Errorf("%v: %s, want a handle of mode %s", tc.args, lines[2], tc.mode)
		}
	}
}
