package etcd

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// q builds a queue from a compact description: x exclusive, s shared,
// pN a permit of N, f foreign; names are their index.
func q(desc ...string) []entry {
	var es []entry
	for i, d := range desc {
		e := entry{name: string(rune('a' + i)), create: int64(i + 1)}
		switch {
		case d == "s":
			e.modeForGrants, e.v.mode = driver.Shared, driver.Shared
		case strings.HasPrefix(d, "p"):
			e.modeForGrants, e.v.mode = driver.Permit, driver.Permit
			e.v.limit = int(d[1] - '0')
		case d == "f":
			e.foreign = true
		}
		es = append(es, e)
	}
	return es
}

// permits is a queue of n permits of n.
func permits(n int) []entry {
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{name: string(rune('a' + i)), create: int64(i + 1), modeForGrants: driver.Permit}
		es[i].v.mode, es[i].v.limit = driver.Permit, n
	}
	return es
}

func TestTurn(t *testing.T) {
	for _, tc := range []struct {
		ahead []entry
		mode  driver.Mode
		limit int
		want  bool
	}{
		{q(), driver.Exclusive, 0, true},
		{q("s"), driver.Exclusive, 0, false},
		{q(), driver.Shared, 0, true},
		{q("s", "s"), driver.Shared, 0, true},
		{q("s", "x"), driver.Shared, 0, false},
		{q("f"), driver.Shared, 0, false},
		{q("f"), driver.Permit, 2, false},
		{q("p2"), driver.Permit, 2, true},
		{q("p2", "p2"), driver.Permit, 2, false},
		{q("s"), driver.Permit, 2, false},
		{q("p2"), driver.Shared, 0, false},
	} {
		if got := turn(tc.ahead, tc.mode, tc.limit); got != tc.want {
			t.Errorf("turn(%d ahead, %v, %d) = %v, want %v", len(tc.ahead), tc.mode, tc.limit, got, tc.want)
		}
	}
}

func TestBlockers(t *testing.T) {
	for _, tc := range []struct {
		ahead []entry
		mode  driver.Mode
		limit int
		want  []string
		all   bool
	}{
		{q("x", "s", "s"), driver.Exclusive, 0, []string{"c"}, false},
		{q("x", "s", "s"), driver.Shared, 0, []string{"a"}, false},
		{q("s", "f", "s"), driver.Shared, 0, []string{"b"}, false},
		{q("p3", "p3", "p3", "p3"), driver.Permit, 3, []string{"b", "c", "d"}, false},
		{q("p3", "x", "p3"), driver.Permit, 3, []string{"b"}, false},
		{q("x", "p2", "p2"), driver.Permit, 2, []string{"b", "c"}, false},
		{permits(maxPermitWatches + 1), driver.Permit, maxPermitWatches + 1, nil, true},
	} {
		got, all := blockers(tc.ahead, tc.mode, tc.limit)
		if !slices.Equal(got, tc.want) || all != tc.all {
			t.Errorf("blockers(%v) = %v, %v; want %v, %v", tc.mode, got, all, tc.want, tc.all)
		}
	}
}

func TestOtherLimit(t *testing.T) {
	es := q("p3", "p2")
	if got := otherLimit(es, 3, "a"); got != 2 {
		t.Errorf("otherLimit = %d, want 2", got)
	}
	if got := otherLimit(q("p3", "x"), 3, ""); got != 0 {
		t.Errorf("otherLimit = %d, want 0", got)
	}
}

func TestNextToken(t *testing.T) {
	if got := nextToken(10, 5); got != 11 {
		t.Errorf("counter ahead of the clock: %d", got)
	}
	if got := nextToken(10, 1000); got != 1000 {
		t.Errorf("clock ahead: %d", got)
	}
	if got := nextToken(0, -1); got != 1 {
		t.Errorf("no counter, clock before 1970: %d", got)
	}
}

// Keys map injectively, and no key's queue prefix is a prefix of
// another key's names.
func TestEscape(t *testing.T) {
	keys := []string{"a", "a/b", "a%2Fb", "a%", "%", "/", "a/", "ü/%"}
	seen := map[string]string{}
	for _, k := range keys {
		e := escape(k)
		if strings.Contains(e, "/") {
			t.Errorf("escape(%q) = %q has a /", k, e)
		}
		if o, dup := seen[e]; dup {
			t.Errorf("escape(%q) = escape(%q) = %q", k, o, e)
		}
		seen[e] = k
	}
	d, _ := newDriver(nil)
	for _, a := range keys {
		for _, b := range keys {
			na, nb := d.names(a), d.names(b)
			if a != b && (strings.HasPrefix(nb.queue, na.queue) || strings.HasPrefix(nb.counter, na.queue)) {
				t.Errorf("%q's names fall under %q's queue %q", b, a, na.queue)
			}
		}
	}
}

func TestValueRoundTrip(t *testing.T) {
	for _, v := range []entryValue{
		{mode: driver.Exclusive, token: 7, since: 99},
		{mode: driver.Shared, since: 1},
		{mode: driver.Permit, limit: 3, token: 1 << 60, since: 2},
		{mode: driver.Shared, token: 4, since: 5, owner: "0123456789abcdef0123456789abcdef"},
		{named: true, token: 5, since: 3, holds: []string{"0123456789abcdef0123456789abcdef", "0123456789abcdeffedcba9876543210"}},
	} {
		got, ok := parseValue(v.String())
		if !ok || got.String() != v.String() {
			t.Errorf("parseValue(%q) = %+v, %v", v.String(), got, ok)
		}
	}
	for _, s := range []string{"", "x", "dlock1 q 0 0 0", "dlock1 x a 0 0", "dlock2 x 0 0 0",
		"dlock1 x 0 1 2 notanowner", "dlock1 x 0 1 2 0123456789abcdef0123456789abcdef extra"} {
		if _, ok := parseValue(s); ok {
			t.Errorf("parseValue(%q) accepted", s)
		}
	}
}

// entryKey is the etcd key of l's entry, as d knows it (l's grant, or
// the slot its attempt holds).
func entryKey(d *etcdDriver, l *driver.Lease) string {
	name, _, _ := d.entryOf(l)
	return d.names(l.Key).queue + name
}

// TestValueString: an entry's value is the layout's fields, one space
// apart, as written before it was built in one buffer (older clients
// parse it so): fmt's "dlock1 %s %d %d %d", then the owner, the holds and
// the note.
func TestValueString(t *testing.T) {
	for _, v := range []entryValue{
		{},
		{mode: driver.Exclusive, token: 1764000000000000, since: 1764000000000001, owner: "0123456789abcdef0123456789abcdef"},
		{mode: driver.Shared, token: math.MaxUint64, since: -5, owner: "o"},
		{mode: driver.Permit, limit: 3, token: 7, since: 9, owner: "0123456789abcdef0123456789abcdef", note: "a b%c\u00e9"},
		{named: true, token: 12, since: 34, holds: []string{"h1", "h2"}, note: "n"},
		{mode: driver.Permit, limit: -1, named: true, holds: []string{"h"}},
	} {
		m := "x"
		switch {
		case v.named:
			m = "o"
		case v.mode == driver.Shared:
			m = "s"
		case v.mode == driver.Permit:
			m = "p"
		}
		want := fmt.Sprintf("dlock1 %s %d %d %d", m, v.limit, v.token, v.since)
		if v.owner != "" {
			want += " " + v.owner
		}
		for _, h := range v.holds {
			want += " " + h
		}
		if v.note != "" {
			want += " " + noteMark + escapeNote(v.note)
		}
		if got := v.String(); got != want {
			t.Errorf("%+v: %q, want %q", v, got, want)
		}
	}
}
