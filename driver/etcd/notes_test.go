package etcd

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// TestNoteValues: a note, whatever printable text it holds, is one field
// of the value and reads back as written, after the owner or the holds,
// also when an older client appended a hold after it.
func TestNoteValues(t *testing.T) {
	owner := strings.Repeat("ab", 16)
	for _, note := range []string{"n", "host:1 ✓", "a\u00a0b\u2003c", "100% #1", "#"} {
		for _, v := range []entryValue{
			{mode: driver.Shared, token: 7, since: 9, owner: owner, note: note},
			{named: true, token: 7, since: 9, holds: []string{owner}, note: note},
		} {
			s := v.String()
			if f := strings.Fields(s); len(f) != 7 || !strings.HasPrefix(f[6], noteMark) {
				t.Fatalf("%q: fields %q; want the note as the seventh", s, f)
			}
			got, ok := parseValue(s)
			if !ok || got.note != note || got.owner != v.owner || !slices.Equal(got.holds, v.holds) {
				t.Fatalf("parseValue(%q) = %+v, %v; want %+v", s, got, ok, v)
			}
		}
		later := entryValue{named: true, holds: []string{owner}, note: note}.String() + " " + strings.Repeat("cd", 16)
		if got, ok := parseValue(later); !ok || got.note != note || len(got.holds) != 2 {
			t.Fatalf("parseValue(%q) = %+v, %v; want the note and two holds", later, got, ok)
		}
	}
	if _, ok := parseValue("dlock1 x 0 1 2 " + owner + " #%zz"); ok {
		t.Fatal("a badly escaped note was read")
	}
}

// TestNoteOlderParsers runs the value parsers of the two earlier layouts
// on noted values: neither takes the note for an owner or a hold of an
// owner. The layout before reused names reads a noted entry's mode and
// limit and sees the note as a field no owner has; the one that added
// OWNER refuses a noted anonymous entry (a foreign one to it: exclusive,
// never its own) and sees a named one's note as a hold of no owner.
func TestNoteOlderParsers(t *testing.T) {
	owner := strings.Repeat("ab", 16)
	anon := entryValue{mode: driver.Shared, token: 7, since: 9, owner: owner, note: owner}.String()
	named := entryValue{named: true, token: 7, since: 9, holds: []string{owner}, note: owner}.String()
	if mode, holds, ok := parseBeforeNames(anon); !ok || mode != "s" || slices.ContainsFunc(holds[1:], driver.IsOwner) {
		t.Fatalf("before reused names, %q: %s %q %v", anon, mode, holds, ok)
	}
	if _, _, ok := parseWithOwner(anon); ok {
		t.Fatalf("with OWNER, %q was read; want it refused", anon)
	}
	for _, parse := range []func(string) (string, []string, bool){parseBeforeNames, parseWithOwner} {
		mode, holds, ok := parse(named)
		if !ok || mode != "o" || len(holds) != 2 || holds[0] != owner || driver.IsOwner(holds[1]) {
			t.Fatalf("%q: %s %q %v; want the hold and a field no owner has", named, mode, holds, ok)
		}
	}
}

// parseBeforeNames is the value parser of the layout before reused names
// (the mode, and every field after SINCE as a hold).
func parseBeforeNames(s string) (string, []string, bool) {
	f := strings.Fields(s)
	if len(f) < 5 || f[0] != "dlock1" || !strings.Contains("xspo", f[1]) || !numbers(f[2:5]) {
		return "", nil, false
	}
	return f[1], f[5:], true
}

// parseWithOwner is the value parser of the layout that added OWNER: an
// anonymous value has at most one field after SINCE, an owner token.
func parseWithOwner(s string) (string, []string, bool) {
	mode, rest, ok := parseBeforeNames(s)
	switch {
	case !ok || mode == "o":
		return mode, rest, ok
	case len(rest) == 1 && driver.IsOwner(rest[0]):
		return mode, rest, true
	case len(rest) > 0:
		return "", nil, false
	}
	return mode, nil, true
}

func numbers(f []string) bool {
	for _, s := range f {
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return false
		}
	}
	return true
}
