package cli

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
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
	// Every duration flag takes plain seconds, as -w does.
	cfg, err = parseRun([]string{"-url", "memory://", "-ttl", "30", "-grace", "1.5", "-wait", "2", "k", "--", "cmd"}, nil)
	if err != nil || cfg.ttl != 30*time.Second || cfg.grace != 1500*time.Millisecond || cfg.wait.d != 2*time.Second {
		t.Errorf("-ttl 30 -grace 1.5 -wait 2: %+v, %v; want 30s, 1.5s, 2s", cfg, err)
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

// TestParseRunForms: every form of -n (the -n rule), -limit, -nonblock,
// -nb, -w, and KEY COMMAND with and without --.
func TestParseRunForms(t *testing.T) {
	type want struct {
		limit int
		wait  string // waitFlag.String(): "forever", "0s", ...
		key   string
		argv  []string
	}
	for _, tc := range []struct {
		args []string
		want want
	}{
		// -n N KEY: the limit, with or without --, flags between.
		{[]string{"-n", "3", "builds", "--", "make"}, want{3, "forever", "builds", []string{"make"}}},
		{[]string{"-n", "3", "builds", "make", "-j4"}, want{3, "forever", "builds", []string{"make", "-j4"}}},
		{[]string{"-n", "3", "-wait", "10s", "builds", "--", "make"}, want{3, "10s", "builds", []string{"make"}}},
		{[]string{"--n", "3", "builds", "make"}, want{3, "forever", "builds", []string{"make"}}},
		{[]string{"-n", "5", "cmd", "--", "x"}, want{5, "forever", "cmd", []string{"x"}}},
		{[]string{"-n=3", "k", "c"}, want{3, "forever", "k", []string{"c"}}},
		{[]string{"-n=3", "-n=4", "k", "c"}, want{4, "forever", "k", []string{"c"}}},
		// -n followed by anything else: flock's -n, fail at once.
		{[]string{"-n", "KEY", "--", "true"}, want{0, "0s", "KEY", []string{"true"}}},
		{[]string{"-n", "KEY", "true"}, want{0, "0s", "KEY", []string{"true"}}},
		{[]string{"-n", "5", "--", "cmd"}, want{0, "0s", "5", []string{"cmd"}}},
		{[]string{"-n", "5", "cmd"}, want{0, "0s", "5", []string{"cmd"}}},
		{[]string{"-n", "5", "--", "cmd", "a", "b"}, want{0, "0s", "5", []string{"cmd", "a", "b"}}},
		{[]string{"-n", "-E", "75", "k", "c"}, want{0, "0s", "k", []string{"c"}}},
		{[]string{"-n", "-wait", "0", "k", "c"}, want{0, "0s", "k", []string{"c"}}},
		{[]string{"-n", "3x", "builds", "make"}, want{0, "0s", "3x", []string{"builds", "make"}}},
		{[]string{"-n=true", "3", "builds", "make"}, want{0, "0s", "3", []string{"builds", "make"}}},
		// The long forms.
		{[]string{"-limit", "4", "k", "c"}, want{4, "forever", "k", []string{"c"}}},
		{[]string{"-limit", "4", "-n", "k", "c"}, want{4, "0s", "k", []string{"c"}}},
		{[]string{"-n", "4", "-limit", "4", "k", "c"}, want{4, "forever", "k", []string{"c"}}},
		{[]string{"-nonblock", "k", "c"}, want{0, "0s", "k", []string{"c"}}},
		{[]string{"-nb", "k", "c"}, want{0, "0s", "k", []string{"c"}}},
		{[]string{"--nb", "-wait", "0", "k", "c"}, want{0, "0s", "k", []string{"c"}}},
		// flock's -w SECONDS beside -wait.
		{[]string{"-w", "5", "k", "c"}, want{0, "5s", "k", []string{"c"}}},
		{[]string{"-w", "2.5", "k", "c"}, want{0, "2.5s", "k", []string{"c"}}},
		{[]string{"-w", "1m", "k", "c"}, want{0, "1m0s", "k", []string{"c"}}},
		// -- is optional, and needed before a command that starts with -.
		{[]string{"k", "cmd", "-x", "--", "y"}, want{0, "forever", "k", []string{"cmd", "-x", "--", "y"}}},
		{[]string{"k", "--", "-x"}, want{0, "forever", "k", []string{"-x"}}},
		{[]string{"k", "--", "--", "x"}, want{0, "forever", "k", []string{"--", "x"}}},
		{[]string{"k", "-"}, want{0, "forever", "k", []string{"-"}}},
	} {
		cfg, err := parseRun(append([]string{"-url", "memory://"}, tc.args...), io.Discard)
		if err != nil {
			t.Errorf("parseRun(%q): %v", tc.args, err)
			continue
		}
		got := want{cfg.limit, cfg.wait.String(), cfg.key, cfg.argv}
		if got.limit != tc.want.limit || got.wait != tc.want.wait || got.key != tc.want.key || !slices.Equal(got.argv, tc.want.argv) {
			t.Errorf("parseRun(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"k", "-x"}, "needs --"},
		{[]string{"k", "-wait", "0", "--", "c"}, "flags go before KEY"},
		{[]string{"-n", "5", "-v", "--", "cmd"}, "flags go before KEY"},
		{[]string{"-n", "3", "-limit", "4", "k", "c"}, "disagree"},
		{[]string{"-nonblock", "-wait", "10s", "k", "c"}, "exclude each other"},
		{[]string{"-n", "-w", "3", "k", "c"}, "exclude each other"},
		{[]string{"-n", "0", "k", "c"}, "-n 0: zero permits would admit no command; want 1 to 65536 permits"},
		{[]string{"-limit", "0", "k", "c"}, "-limit 0: zero permits would admit no command; want 1 to 65536 permits"},
		{[]string{"-limit", "-3", "k", "c"}, "-limit -3: a number of permits cannot be negative; want 1 to 65536 permits"},
		{[]string{"-limit", "70000", "k", "c"}, "-limit 70000: too many permits; want 1 to 65536 permits"},
		{[]string{"-n", "99999999999999999999", "k", "c"}, "-n 99999999999999999999: too many permits; want 1 to 65536 permits"},
		{[]string{"-ttl", "soon", "k", "c"}, `invalid value "soon" for flag -ttl: want a duration such as 30s or 1m30s, or seconds`},
		{[]string{"-n=x", "k", "c"}, "invalid"},
		{[]string{"-limit", "two", "k", "c"}, "invalid value"},
		{[]string{"-n", "2", "-owner", "x", "k", "c"}, "-n and -owner exclude each other"},
		{[]string{"-limit", "2", "-owner", "x", "k", "c"}, "-limit and -owner exclude each other"},
		{[]string{"--", "c"}, "missing KEY"},
		{[]string{"k"}, "missing COMMAND"},
		{[]string{"-n", "3"}, "missing COMMAND"}, // -n, KEY 3
		{[]string{"k", "--"}, "missing COMMAND"},
		{[]string{}, "missing KEY"},
	} {
		_, err := parseRun(append([]string{"-url", "memory://"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseRun(%q): %v; want an error with %q", tc.args, err, tc.want)
		}
	}
}

func TestSchemeHint(t *testing.T) {
	schemes := "schemes: " + strings.Join(lock.Schemes(), ", ")
	for _, tc := range []struct{ raw, want string }{
		{"127.0.0.1:6379", "missing scheme: did you mean redisnx://127.0.0.1:6379? " + schemes},
		{"localhost:6379", "did you mean redisnx://localhost:6379?"},
		{"localhost", "did you mean redisnx://localhost?"},
		{"h1:11211,h2:11211", "did you mean memcached://h1:11211,h2:11211?"},
		{"zk:2181/app/locks", "did you mean zookeeper://zk:2181/app/locks?"},
		{"u:secret@h:6379/0", "did you mean redisnx://u:xxxxx@h:6379/0?"},
		{"redisnx://h:6379", ""},
		{"nosuch://h", ""}, // lock.Open names the schemes
		{"memory:", ""},
	} {
		got := schemeHint(tc.raw)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) || strings.Contains(got, "secret") {
			t.Errorf("schemeHint(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}
