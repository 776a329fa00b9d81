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
		for _, mode := range []driver.Mode{driver.Exclusive, driver.Shared} {
			l := &Lease{own: driver.Lease{Key: key, Owner: newOwner(), Token: 1795563207923503, Mode: mode}}
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
			want := handle{key: key, owner: l.own.Owner, token: l.own.Token, mode: mode}
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
	f.Add("dlock1.x.0123456789ABCDEF0123456789abcdef.42.aw")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHandle(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("empty error for %q", s)
			}
			return
		}
		if checkKey(h.key) != nil || !isOwner(h.owner) || h.token == 0 {
			t.Fatalf("parseHandle(%q) accepted %+v", s, h)
		}
		l := &Lease{own: driver.Lease{Key: h.key, Owner: h.owner, Token: h.token, Mode: h.mode}}
		l.dl = &l.own
		if again, err := parseHandle(l.Handle()); err != nil || again != h {
			t.Fatalf("round trip of %q: %+v, %v", s, again, err)
		}
	})
}
