package lock

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// Handles carry any valid key, owner, token and mode through parseHandle
// unchanged, and stay printable (no byte outside URL-safe base64, digits,
// hex and the dots).
func TestHandleRoundTrip(t *testing.T) {
	for _, key := range []string{"k", "}", "{a}", "a.b.c", "ключ/ü/😀", strings.Repeat("x", 1024), " space\ttab\n"} {
		for _, named := range []bool{false, true} {
			mode, limit := driver.Exclusive, 0
			owner := newOwner()
			switch {
			case named:
				owner = namedOwner(key)
			case len(key)%3 == 0:
				mode = driver.Shared
			case len(key)%3 == 1:
				mode, limit = driver.Permit, len(key)
			}
			l := &Lease{own: driver.Lease{Key: key, Owner: owner, Token: 1795563207923503, Mode: mode, Limit: limit, Reentry: named}}
			l.dl = &l.own
			h := l.Handle()
			for i := 0; i < len(h); i++ {
				if c := h[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
					t.Fatalf("handle %q has byte %q", h, c)
				}
			}
			got, err := parseHandle(h)
			if err != nil {
				t.Fatalf("parseHandle(%q): %v", h, err)
			}
			want := handle{key: key, owner: l.own.Owner, token: l.own.Token, mode: mode, limit: limit, reentrant: named}
			if got != want {
				t.Errorf("parseHandle(%q) = %+v, want %+v", h, got, want)
			}
		}
	}
}

// Malformed handles are refused, each with a message, never a panic.
func FuzzParseHandle(f *testing.F) {
	f.Add("dlock1.x.0123456789abcdef0123456789abcdef.42.aw")
	f.Add("dlock1.s.0123456789abcdef0123456789abcdef.1.")
	f.Add("dlock1.o.0123456789abcdef0123456789abcdef.7.aw")
	f.Add("dlock1.x.0123456789ABCDEF0123456789abcdef.42.aw")
	f.Add("dlock1.p3.0123456789abcdef0123456789abcdef.9.aw")
	f.Add("dlock1.p03.0123456789abcdef0123456789abcdef.9.aw")
	f.Add("dlock1.p0.0123456789abcdef0123456789abcdef.9.aw")
	f.Add("dlock1.p65537.0123456789abcdef0123456789abcdef.9.aw")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHandle(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error for %q", s)
			}
			return
		}
		if checkKey(h.key) != nil || !driver.IsOwner(h.owner) || h.token == 0 || (h.mode == driver.Permit) != (h.limit > 0) || checkLimit(max(h.limit, 1)) != nil {
			t.Fatalf("parseHandle(%q) accepted %+v", s, h)
		}
		l := &Lease{own: driver.Lease{Key: h.key, Owner: h.owner, Token: h.token, Mode: h.mode, Limit: h.limit, Reentry: h.reentrant}}
		l.dl = &l.own
		if again, err := parseHandle(l.Handle()); err != nil || again != h {
			t.Fatalf("round trip of %q: %+v, %v", s, again, err)
		}
	})
}

// Named owners: every attempt of one id shares the first
// driver.NamedOwnerLen digits, is otherwise unique, and is a valid owner
// token; different ids differ there.
func TestNamedOwner(t *testing.T) {
	a, b, c := namedOwner("job-1"), namedOwner("job-1"), namedOwner("job-2")
	for _, o := range []string{a, b, c} {
		if !driver.IsOwner(o) {
			t.Errorf("namedOwner gave %q, not 32 lowercase hex digits", o)
		}
	}
	if !driver.SameOwner(a, b) || a == b {
		t.Errorf("two attempts of one id: %q, %q; want the same owner, different attempts", a, b)
	}
	if driver.SameOwner(a, c) {
		t.Errorf("two ids gave the same owner: %q, %q", a, c)
	}
}

// Permit handles: the limit is decimal without leading zeros, from 1 to
// MaxPermits; anything else is refused.
func TestPermitHandleModes(t *testing.T) {
	const rest = ".0123456789abcdef0123456789abcdef.9.aw"
	for mode, want := range map[string]int{"p1": 1, "p3": 3, "p65536": MaxPermits, "p0": 0, "p03": 0, "p": 0, "p-1": 0, "p+1": 0, "p65537": 0, "p1x": 0, "P3": 0} {
		h, err := parseHandle("dlock1." + mode + rest)
		switch {
		case want == 0 && err == nil:
			t.Errorf("mode %q accepted: %+v", mode, h)
		case want > 0 && (err != nil || h.mode != driver.Permit || h.limit != want):
			t.Errorf("mode %q: %+v, %v; want a permit of %d", mode, h, err, want)
		}
	}
}
