package zookeeper

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
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
		{nodePrefix(owner, driver.Exclusive) + "0000000007", true, 7, false},
		{nodePrefix(owner, driver.Shared) + "0000000008", true, 8, true},
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
		if ok != tc.ok || ok && (c.seq != tc.seq || c.shared != tc.shared) {
			t.Errorf("parseChild(%q) = %+v, %v; want seq %d shared %v ok %v", tc.name, c, ok, tc.seq, tc.shared, tc.ok)
		}
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
		{"writer behind writer watches predecessor", []string{w(3), w(1), w(2)}, w(3), verdict{present: true, watch: w(2)}},
		{"writer behind reader", []string{r(1), w(2)}, w(2), verdict{present: true, watch: r(1)}},
		{"readers share", []string{r(1), r(2)}, r(2), verdict{present: true, granted: true}},
		{"reader behind writer", []string{w(1), r(2)}, r(2), verdict{present: true, watch: w(1)}},
		{"reader watches nearest earlier writer", []string{w(1), r(2), w(3), r(4), r(5)}, r(5), verdict{present: true, watch: w(3)}},
		{"later nodes do not matter", []string{r(1), w(2), w(3)}, r(1), verdict{present: true, granted: true}},
		{"foreign junk ignored", []string{"config", w(2)}, w(2), verdict{present: true, granted: true}},
	} {
		if got := judge(tc.children, tc.own); got != tc.want {
			t.Errorf("%s: judge = %+v, want %+v", tc.name, got, tc.want)
		}
	}
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
