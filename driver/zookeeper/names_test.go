package zookeeper

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// validName mirrors ZooKeeper's PathUtils.validatePath for one node name:
// it checks UTF-16 code units, as the Java server does.
func validName(name string) bool {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") || !utf8.ValidString(name) {
		return false
	}
	for _, c := range utf16.Encode([]rune(name)) {
		switch {
		case c == 0, c <= 0x1f, c >= 0x7f && c <= 0x9f, c >= 0xd800 && c <= 0xf8ff, c >= 0xfff0:
			return false
		}
	}
	return true
}

// unescape inverts EscapeKey.
func unescape(t *testing.T, name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b.WriteByte(name[i])
			continue
		}
		v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			t.Fatalf("bad escape in %q: %v", name, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String()
}

var oddKeys = []string{
	"plain", "orders/42", "a%2Fb", "a/b", "%", "%%", ".", "..", "...", "./x", "a b", "tab\t", "nul\x00byte",
	"new\nline", "ctl\x01", "\x7f", "\u0085", "unicodé ключ 鍵", "🔒", "\ue000private", "\uf8ff", "\ufff0", "\uffff",
	"zookeeper", "lock-0000000001", "_c_0123-lock-", "UPPER", "upper", strings.Repeat("x", 1024),
}

func TestEscapeKey(t *testing.T) {
	seen := map[string]string{}
	for _, k := range oddKeys {
		name := EscapeKey(k)
		if !validName(name) {
			t.Errorf("EscapeKey(%q) = %q: not a valid ZooKeeper node name", k, name)
		}
		if back := unescape(t, name); back != k {
			t.Errorf("EscapeKey(%q) = %q, which decodes to %q", k, name, back)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("keys %q and %q both map to %q", other, k, name)
		}
		seen[name] = k
	}
	for k, want := range map[string]string{"orders-42": "orders-42", "orders/42": "orders%2F42", "50%": "50%25", ".": "%2E", "🔒": "%F0%9F%94%92", "鍵": "鍵"} {
		if got := EscapeKey(k); got != want {
			t.Errorf("EscapeKey(%q) = %q, want %q", k, got, want)
		}
	}
	if got := keyPath("/", "zookeeper"); got != "/%7Aookeeper" {
		t.Errorf("keyPath(/, zookeeper) = %q: /zookeeper is reserved", got)
	}
	if got := keyPath("/app", "zookeeper"); got != "/app/zookeeper" {
		t.Errorf("keyPath(/app, zookeeper) = %q", got)
	}
}

func FuzzEscapeKey(f *testing.F) {
	for _, k := range oddKeys {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if k == "" || !utf8.ValidString(k) {
			return // lock refuses these before the driver sees them
		}
		name := EscapeKey(k)
		if !validName(name) {
			t.Fatalf("EscapeKey(%q) = %q: not a valid node name", k, name)
		}
		if back := unescape(t, name); back != k {
			t.Fatalf("EscapeKey(%q) = %q decodes to %q", k, name, back)
		}
	})
}

func TestParseChild(t *testing.T) {
	owner := strings.Repeat("ab", 16)
	for _, tc := range []struct {
		name   string
		ok     bool
		seq    int64
		shared bool
	}{
		{nodePrefix(owner, driver.Exclusive, 0) + "0000000007", true, 7, false},
		{nodePrefix(owner, driver.Shared, 0) + "0000000008", true, 8, true},
		{"_c_0123456789abcdef0123456789abcdef-lock-0000000009", true, 9, false},      // zk.Lock
		{"_c_5a1b7e42-1a2b-4c3d-8e9f-0a1b2c3d4e5f-lock-0000000010", true, 10, false}, // Curator's mutex
		{"lock-0000000011", true, 11, false},                                         // zk.Lock without protection
		{"_c_x-__lock__0000000012", true, 12, false},                                 // the Python client
		{"_c_x-__READ__0000000013", true, 13, false},                                 // Curator's read lock: not ours, so exclusive
		{"read-lock-0000000014", true, 14, false},                                    // unprotected: not ours
		{"config", false, 0, false},
		{"lock-", false, 0, false},
		{"lock-+1", false, 0, false},
	} {
		c, ok := parseChild(tc.name)
		if ok != tc.ok || ok && (c.seq != tc.seq || c.shared != tc.shared || c.limit != 0) {
			t.Errorf("parseChild(%q) = %+v, %v; want seq %d shared %v ok %v", tc.name, c, ok, tc.seq, tc.shared, tc.ok)
		}
	}
	// Permits: dlock's protected names with a limit from 1 to MaxPermits;
	// anything else that looks like one is an exclusive lock node.
	for name, limit := range map[string]int{
		nodePrefix(owner, driver.Permit, 3) + "0000000015":               3,
		nodePrefix(owner, driver.Permit, lock.MaxPermits) + "0000000015": lock.MaxPermits,
		"_c_" + owner + "-permit-0-lock-0000000015":                      0,
		"_c_" + owner + "-permit-65537-lock-0000000015":                  0,
		"_c_" + owner + "-permit--2-lock-0000000015":                     0,
		"_c_" + owner + "-permit-+2-lock-0000000015":                     0,
		"_c_" + owner + "-permit--lock-0000000015":                       0,
		"_c_" + owner + "-permit-2lock-0000000015":                       0,
		owner + "-permit-2-lock-0000000015":                              0, // unprotected
	} {
		c, ok := parseChild(name)
		if !ok || c.seq != 15 || c.shared || c.limit != limit {
			t.Errorf("parseChild(%q) = %+v, %v; want seq 15, limit %d", name, c, ok, limit)
		}
	}
	// zk.Lock and Curator's mutex take the number after the last "lock-"
	// as the sequence: a permit is an ordinary lock node to them.
	if name := nodePrefix(owner, driver.Permit, 7) + "0000000016"; name[strings.LastIndex(name, "-")+1:] != "0000000016" || name[strings.LastIndex(name, "lock-")+5:] != "0000000016" {
		t.Errorf("permit name %q: zk.Lock or Curator would not read its sequence", name)
	}
}

func TestJudge(t *testing.T) {
	w := func(seq int) string { return "_c_" + strings.Repeat("0", 32) + "-lock-" + strconv.Itoa(1000000000+seq) }
	r := func(seq int) string {
		return "_c_" + strings.Repeat("1", 32) + "-read-lock-" + strconv.Itoa(1000000000+seq)
	}
	for _, tc := range []struct {
		name     string
		children []string
		own      string
		want     verdict
	}{
		{"alone", []string{w(1)}, w(1), verdict{present: true, granted: true}},
		{"missing", []string{w(1)}, w(2), verdict{}},
		{"writer behind writer watches predecessor", []string{w(3), w(1), w(2)}, w(3), verdict{present: true, watch: []string{w(2)}}},
		{"writer behind reader", []string{r(1), w(2)}, w(2), verdict{present: true, watch: []string{r(1)}, sole: r(1)}},
		{"readers share", []string{r(1), r(2)}, r(2), verdict{present: true, granted: true}},
		{"reader behind writer", []string{w(1), r(2)}, r(2), verdict{present: true, watch: []string{w(1)}, sole: w(1)}},
		{"reader watches nearest earlier writer", []string{w(1), r(2), w(3), r(4), r(5)}, r(5), verdict{present: true, watch: []string{w(3)}}},
		{"later nodes do not matter", []string{r(1), w(2), w(3)}, r(1), verdict{present: true, granted: true}},
		{"foreign junk ignored", []string{"config", w(2)}, w(2), verdict{present: true, granted: true}},
	} {
		if got := judge(tc.children, tc.own); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: judge = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestJudgePermits: the permit rule (every node before it a permit, fewer
// than N of them), the refusal of a mismatched limit, and the watches.
func TestJudgePermits(t *testing.T) {
	w := func(seq int) string { return "_c_" + strings.Repeat("0", 32) + "-lock-" + strconv.Itoa(1000000000+seq) }
	r := func(seq int) string {
		return "_c_" + strings.Repeat("1", 32) + "-read-lock-" + strconv.Itoa(1000000000+seq)
	}
	p := func(n, seq int) string {
		return nodePrefix(strings.Repeat("2", 32), driver.Permit, n) + strconv.Itoa(1000000000+seq)
	}
	p2 := func(seq int) string { return p(2, seq) }
	for _, tc := range []struct {
		name     string
		children []string
		own      string
		want     verdict
	}{
		{"alone", []string{p2(1)}, p2(1), verdict{present: true, granted: true}},
		{"second of two", []string{p2(1), p2(2)}, p2(2), verdict{present: true, granted: true}},
		{"first of two", []string{p2(1), p2(2)}, p2(1), verdict{present: true, granted: true}},
		{"third of two watches both", []string{p2(3), p2(1), p2(2)}, p2(3), verdict{present: true, watch: []string{p2(1), p2(2)}}},
		{"behind a permit waiter: the two before it", []string{p2(1), p2(2), p2(3), p2(4)}, p2(4), verdict{present: true, watch: []string{p2(2), p2(3)}}},
		{"granted with a waiter before it that has not looked", []string{p2(2), p2(3)}, p2(3), verdict{present: true, granted: true}},
		{"limit three, fifth in line", []string{p(3, 1), p(3, 2), p(3, 3), p(3, 4), p(3, 5)}, p(3, 5), verdict{present: true, watch: []string{p(3, 2), p(3, 3), p(3, 4)}}},
		{"gaps do not count", []string{p2(5), p2(9)}, p2(9), verdict{present: true, granted: true}},
		{"limit one", []string{p(1, 1), p(1, 2)}, p(1, 2), verdict{present: true, watch: []string{p(1, 1)}, sole: p(1, 1)}},
		{"behind a writer", []string{w(1), p2(2)}, p2(2), verdict{present: true, watch: []string{w(1)}, sole: w(1)}},
		{"behind a reader", []string{r(1), p2(2)}, p2(2), verdict{present: true, watch: []string{r(1)}, sole: r(1)}},
		{"behind readers: the nearest", []string{r(1), r(2), p2(3)}, p2(3), verdict{present: true, watch: []string{r(2)}}},
		{"first in line behind a writer and a permit: the writer", []string{w(1), p2(2), p2(3)}, p2(3), verdict{present: true, watch: []string{w(1)}}},
		{"two permits behind a writer, then one: the two", []string{w(1), p2(2), p2(3), p2(4)}, p2(4), verdict{present: true, watch: []string{p2(2), p2(3)}}},
		{"behind a writer waiter", []string{p2(1), w(2), p2(3)}, p2(3), verdict{present: true, watch: []string{w(2)}}},
		{"behind a reader waiter behind a permit", []string{p2(1), r(2), p2(3)}, p2(3), verdict{present: true, watch: []string{r(2)}}},
		{"writer behind permits", []string{p2(1), p2(2), w(3)}, w(3), verdict{present: true, watch: []string{p2(2)}}},
		{"reader behind permits", []string{p2(1), r(2)}, r(2), verdict{present: true, watch: []string{p2(1)}, sole: p2(1)}},
		{"foreign nodes are exclusive", []string{"_c_x-__lock__0000000001", p2(2)}, p2(2), verdict{present: true, watch: []string{"_c_x-__lock__0000000001"}, sole: "_c_x-__lock__0000000001"}},
		{"limit mismatch", []string{p(3, 1), p2(2)}, p2(2), verdict{present: true, conflict: 3, conflictNode: p(3, 1)}},
		{"limit mismatch with a waiter", []string{p2(1), p2(2), p(3, 3), p2(4)}, p(3, 3), verdict{present: true, conflict: 2, conflictNode: p2(1)}},
		{"a later mismatch is not ours to refuse", []string{p2(1), p(3, 2)}, p2(1), verdict{present: true, granted: true}},
	} {
		if got := judge(tc.children, tc.own); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: judge = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// The granted permits are a prefix of the queue, at most N of them,
	// whatever the mix of nodes.
	kinds := []func(int) string{w, r, p2}
	for mix := range 3 * 3 * 3 * 3 * 3 {
		var children []string
		for i, m := 0, mix; i < 5; i, m = i+1, m/3 {
			children = append(children, kinds[m%3](i+1))
		}
		permits, gap := 0, false
		for _, c := range children {
			v := judge(children, c)
			if v.granted && gap {
				t.Errorf("%q: %s granted behind a waiter", children, c)
			}
			gap = gap || !v.granted
			if v.granted && strings.Contains(c, "-permit-") {
				permits++
			}
			if !v.granted && !blockedByWatched(children, c, v.watch) {
				t.Errorf("%q: %s watches %q, but is granted once every other node before it is gone", children, c, v.watch)
			}
		}
		if permits > 2 {
			t.Errorf("%q: %d permits granted of 2", children, permits)
		}
	}
}

// blockedByWatched reports whether own, waiting among children, stays
// blocked when every node before it but those it watches is gone (the most
// that can go without one of its watches firing): then no departure it
// does not hear of can be its turn.
func blockedByWatched(children []string, own string, watch []string) bool {
	if len(watch) == 0 {
		return false
	}
	me, _ := parseChild(own)
	left := []string{own}
	for _, name := range children {
		c, _ := parseChild(name)
		if c.seq > me.seq {
			left = append(left, name)
		}
	}
	for _, name := range watch {
		c, _ := parseChild(name)
		if c.seq >= me.seq || !slices.Contains(children, name) {
			return false
		}
		left = append(left, name)
	}
	return !judge(left, own).granted
}

func TestCheckRoot(t *testing.T) {
	for _, ok := range []string{"/", "/dlock", "/app/locks", "/a-b_c.d"} {
		if err := checkRoot(ok); err != nil {
			t.Errorf("checkRoot(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "dlock", "/dlock/", "//x", "/a//b", "/a/./b", "/a/../b", "/zookeeper", "/zookeeper/x", "/a%b", "/a\x00b"} {
		if err := checkRoot(bad); err == nil {
			t.Errorf("checkRoot(%q) accepted", bad)
		}
	}
}
