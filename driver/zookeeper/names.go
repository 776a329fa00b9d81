package zookeeper

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

// Node names. A key's node is Root + "/" + EscapeKey(key); its children are
// the lock nodes, named as go-zookeeper's zk.Lock and Curator's
// InterProcessMutex name theirs, so that mixed fleets exclude each other:
//
//	_c_<owner>-lock-<seq>        exclusive
//	_c_<owner>-read-lock-<seq>   shared (read)
//
// where _c_<owner>- is the "protected" prefix that lets a client find its
// node again when the create's reply is lost, and <seq> is the 10-digit
// sequence number ZooKeeper appends.
const (
	protectedPrefix = "_c_"
	lockMarker      = "lock-"
	writeSuffix     = "-" + lockMarker
	readSuffix      = "-read-" + lockMarker
)

// ownPrefix is the start of every node name owner creates.
func ownPrefix(owner string) string { return protectedPrefix + owner + "-" }

// nodePrefix is the name of owner's lock node before ZooKeeper appends the
// sequence number.
func nodePrefix(owner string, mode driver.Mode) string {
	if mode == driver.Shared {
		return protectedPrefix + owner + readSuffix
	}
	return protectedPrefix + owner + writeSuffix
}

// EscapeKey returns the node name that key maps to: key itself, except that
// '%', '/', control characters and the characters ZooKeeper refuses in
// paths (U+007F-U+009F, U+D800-U+F8FF, U+FFF0 and above, which includes
// every character outside the Basic Multilingual Plane) are written as
// %XX escapes of their UTF-8 bytes, and the names "." and ".." as %2E and
// %2E%2E. The mapping is injective, so distinct keys never share a node,
// and keeps ordinary keys readable: "orders-42" is "orders-42",
// "orders/42" is "orders%2F42". Use it to point another ZooKeeper client
// (zk.Lock, Curator) at the node of a dlock key.
func EscapeKey(key string) string {
	if key == "." || key == ".." {
		return strings.Repeat("%2E", len(key))
	}
	clean := true
	for _, r := range key {
		if needsEscape(r) {
			clean = false
			break
		}
	}
	if clean && utf8.ValidString(key) {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 16)
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		if r == utf8.RuneError && size <= 1 || needsEscape(r) {
			for _, c := range []byte(key[i : i+max(size, 1)]) {
				b.WriteByte('%')
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&15])
			}
		} else {
			b.WriteString(key[i : i+size])
		}
		i += max(size, 1)
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

// needsEscape reports whether r cannot appear as itself in a node name (see
// ZooKeeper's PathUtils.validatePath, which checks UTF-16 code units, so
// characters outside the BMP arrive there as refused surrogates).
func needsEscape(r rune) bool {
	switch {
	case r == '%', r == '/':
		return true
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0xd800 && r <= 0xf8ff:
		return true
	case r >= 0xfff0:
		return true
	}
	return false
}

// keyPath returns the path of key's node under root.
func keyPath(root, key string) string {
	name := EscapeKey(key)
	if root == "/" {
		if name == "zookeeper" { // /zookeeper is reserved
			name = "%7Aookeeper"
		}
		return "/" + name
	}
	return root + "/" + name
}

// child is a lock node as the queue sees it.
type child struct {
	name   string
	seq    int64
	shared bool
}

// parseChild reads a child of a key node. Like zk.Lock, it takes the
// sequence number from after the last "lock-" or, failing that, the last
// "__" (the Python client's "__lock__" names); names with neither are not
// lock nodes and are ignored (zk.Lock refuses them). Only dlock's own
// read-lock names are shared: every other lock node is exclusive, the safe
// reading of a node whose recipe is unknown.
func parseChild(name string) (child, bool) {
	var digits string
	i := strings.LastIndex(name, lockMarker)
	if i >= 0 {
		digits = name[i+len(lockMarker):]
	} else if j := strings.LastIndex(name, "__"); j >= 0 {
		digits = name[j+2:]
	} else {
		return child{}, false
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || digits == "" || digits[0] == '+' {
		return child{}, false
	}
	shared := i >= 0 && strings.HasPrefix(name, protectedPrefix) && strings.HasSuffix(name[:i+len(lockMarker)], readSuffix)
	return child{name: name, seq: seq, shared: shared}, true
}

// verdict is where a lock node stands in its key's queue.
type verdict struct {
	present bool   // the node is among the children
	granted bool   // nothing before it blocks it
	watch   string // when not granted: the nearest earlier node that blocks it
}

// judge applies the recipe to the children of a key node: an exclusive
// node is granted when no node has a smaller sequence number, a shared one
// when no exclusive node has; otherwise it waits for the nearest blocker
// before it (a writer for its predecessor, a reader for the nearest earlier
// writer), so that each release wakes one waiter, not the herd.
func judge(children []string, own string) verdict {
	me, ok := parseChild(own)
	if !ok || !slices.Contains(children, own) {
		return verdict{}
	}
	v := verdict{present: true, granted: true}
	best := int64(-1 << 63)
	for _, name := range children {
		c, ok := parseChild(name)
		if !ok || name == own || c.seq >= me.seq {
			continue
		}
		if me.shared && c.shared {
			continue
		}
		v.granted = false
		if c.seq > best {
			best, v.watch = c.seq, name
		}
	}
	return v
}
