package main

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestWaitFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		forever bool
		d       time.Duration
		bad     bool
	}{
		{"forever", true, 0, false},
		{"0", false, 0, false},
		{"0s", false, 0, false},
		{"30s", false, 30 * time.Second, false},
		{"1.5", false, 1500 * time.Millisecond, false},
		{"10", false, 10 * time.Second, false},
		{"-1s", false, 0, true},
		{"-3", false, 0, true},
		{"soon", false, 0, true},
		{"NaN", false, 0, true},
		{"1e300", false, 0, true},
	} {
		var w waitFlag
		err := w.Set(tc.in)
		if (err != nil) != tc.bad || (err == nil && (w.forever != tc.forever || w.d != tc.d)) {
			t.Errorf("-wait %q: got %+v, %v", tc.in, w, err)
		}
	}
	if !(waitFlag{}).once() || (waitFlag{forever: true}).once() || (waitFlag{d: time.Second}).once() {
		t.Errorf("once() is wrong")
	}
}

func TestParseRun(t *testing.T) {
	cfg, err := parseRun([]string{"-url", "memory://", "-wait", "0", "-E", "75", "-ttl", "3s", "-grace", "0", "k", "--", "cmd", "-x", "--", "y"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.key != "k" || !slices.Equal(cfg.argv, []string{"cmd", "-x", "--", "y"}) || cfg.conflict != 75 || cfg.ttl != 3*time.Second || cfg.grace != 0 || !cfg.wait.once() {
		t.Errorf("parsed %+v", cfg)
	}
	cfg, err = parseRun([]string{"-url", "memory://", "k", "--", "cmd"}, nil)
	if err != nil || !cfg.wait.forever || cfg.conflict != exitConflict || cfg.grace != 5*time.Second {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	cfg, err = parseRun([]string{"-url", "memory://", "-n", "3", "k", "--", "cmd"}, nil)
	if err != nil || cfg.limit != 3 || cfg.owner != "" {
		t.Errorf("-n 3: %+v, %v", cfg, err)
	}
	// $DLOCK_OWNER (an outer dlock run -owner's) is for locks: -n ignores
	// it, while an -owner given with -n is refused.
	t.Setenv("DLOCK_OWNER", "outer")
	if cfg, err = parseRun([]string{"-url", "memory://", "-n", "1", "k", "--", "cmd"}, nil); err != nil || cfg.owner != "" || cfg.limit != 1 {
		t.Errorf("-n 1 with DLOCK_OWNER set: %+v, %v", cfg, err)
	}
	if cfg, err = parseRun([]string{"-url", "memory://", "k", "--", "cmd"}, nil); err != nil || cfg.owner != "outer" || cfg.limit != 0 {
		t.Errorf("DLOCK_OWNER without -n: %+v, %v", cfg, err)
	}
	for _, args := range [][]string{
		{"-url", "memory://", "-n", "0", "k", "--", "cmd"},
		{"-url", "memory://", "-n", "-2", "k", "--", "cmd"},
		{"-url", "memory://", "-n", "65537", "k", "--", "cmd"},
		{"-url", "memory://", "-n", "2", "-owner", "x", "k", "--", "cmd"},
		{"-url", "memory://", "-grace", "-1s", "k", "--", "cmd"},
		{"-url", "memory://", "-ttl", "-1s", "k", "--", "cmd"},
		{"-url", "memory://", "k", "-wait", "0", "--", "cmd"},
	} {
		if _, err := parseRun(args, nil); err == nil {
			t.Errorf("parseRun(%q) accepted", args)
		}
	}
}

// TestResource checks the demo's overlap and stale-token detector, with
// two handles on one file as two worker processes have.
func TestResource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r")
	a, err := openResource(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openResource(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	step := func(r *resource, token uint64, wantOverlap, wantStale bool) {
		t.Helper()
		overlap, stale, err := r.enter(token)
		if err != nil || overlap != wantOverlap || stale != wantStale {
			t.Fatalf("enter(%d) = overlap %v, stale %v, %v; want %v, %v", token, overlap, stale, err, wantOverlap, wantStale)
		}
	}
	step(a, 5, false, false)
	a.leave(5)
	step(b, 7, false, false) // in turn, increasing: fine
	step(a, 9, true, false)  // b is still inside: an overlap
	b.leave(7)               // not the latest holder: a stays inside
	if inside, highest, _ := a.state(); !inside || highest != 9 {
		t.Fatalf("state = %v, %d; want inside, 9", inside, highest)
	}
	a.leave(9)
	step(b, 8, false, true) // below 9: stale
	b.leave(8)
	step(a, 9, false, true) // equal: stale too
	a.leave(9)
	if inside, _, _ := a.state(); inside {
		t.Fatalf("still inside after everyone left")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	if p := percentile(ds, 50); p != 50 {
		t.Errorf("p50 = %d", p)
	}
	if p := percentile(ds, 99); p != 99 {
		t.Errorf("p99 = %d", p)
	}
	if p := percentile(ds[:1], 99); p != 1 {
		t.Errorf("p99 of one = %d", p)
	}
	if p := percentile(nil, 50); p != 0 {
		t.Errorf("p50 of none = %d", p)
	}
}
