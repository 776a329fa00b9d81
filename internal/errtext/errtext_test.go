package errtext

import (
	"strings"
	"testing"
	"time"
)

func TestQuote(t *testing.T) {
	huge := strings.Repeat("k", 1<<20)
	for _, c := range []struct{ in, want string }{
		{"a/b", `"a/b"`},
		{strings.Repeat("x", MaxShown), `"` + strings.Repeat("x", MaxShown) + `"`},
		{huge, `"` + strings.Repeat("k", MaxShown) + `"... (1048576 bytes)`},
		// A cut never splits a rune: é is 2 bytes, and 127 of them are 254.
		{strings.Repeat("é", 127), `"` + strings.Repeat("é", MaxShown/2) + `"... (254 bytes)`},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%.20q...) = %.80s..., want %.80s...", c.in, got, c.want)
		}
	}
	if got := Bound(huge); len(got) > MaxShown+30 || !strings.HasSuffix(got, "... (1048576 bytes)") {
		t.Errorf("Bound(1 MiB) = %d bytes ending %q", len(got), got[len(got)-25:])
	}
}

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{29999996585 * time.Nanosecond, "30s"},
		{90*time.Second + 400*time.Millisecond, "1m30s"},
		{2345 * time.Millisecond, "2.3s"},
		{249600 * time.Microsecond, "250ms"},
		{1500 * time.Microsecond, "2ms"},
		{123456 * time.Nanosecond, "123µs"},
		{-29999996585 * time.Nanosecond, "-30s"},
		{720 * time.Hour, "720h0m0s"},
	} {
		if got := Duration(c.in).String(); got != c.want {
			t.Errorf("Duration(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestCeil(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{29999996585 * time.Nanosecond, "30s"},
		{1240 * time.Millisecond, "1.3s"},
		{1200 * time.Millisecond, "1.2s"},
		{1001 * time.Microsecond, "2ms"},
		{-1240 * time.Millisecond, "-1.2s"},
	} {
		if got := Ceil(c.in).String(); got != c.want {
			t.Errorf("Ceil(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}
