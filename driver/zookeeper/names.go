package zookeeper

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/lock"
)

// Node names. A key's node is Root + "/" + EscapeKey(key); its children are
// the lock nodes, named as go-zookeeper's zk.Lock and Curator's
// InterProcessMutex name theirs, so that mixed fleets exclude each other:
//
//	_c_<owner>-lock-<seq>             exclusive
//	_c_<owner>-read-lock-<seq>        shared (read)
//	_c_<owner>-permit-<N>-lock-<seq>  a permit of a semaphore of N
//
// where _c_<owner>- is the "protected" prefix that lets a client find its
// node again when the create's reply is lost, <seq> is the 10-digit
// sequence number ZooKeeper appends, and <N> the limit in decimal.
const (
	protectedPrefix = "_c_"
	lockMarker      = "lock-"
	writeSuffix     = "-" + lockMarker
	readSuffix      = "-read-" + lockMarker
	permitInfix     = "-permit-"
)

// ownPrefix is the start of every node name owner creates.
func ownPrefix(owner string) string { return protectedPrefix + owner + "-" }

// nodePrefix is the name of owner's lock node before ZooKeeper appends the
// sequence number; limit is a permit's (driver.Lease.Limit).
func nodePrefix(owner string, mode driver.Mode, limit int) string {
	switch mode {
	case driver.Shared:
		return protectedPrefix + owner + readSuffix
	case driver.Permit:
		return protectedPrefix + owner + permitInfix + strconv.Itoa(limit) + writeSuffix
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
	limit  int // a permit's N; 0 for the other nodes
}

// parseChild reads a child of a key node. Like zk.Lock, it takes the
// sequence number from after the last "lock-" or, failing that, the last
// "__" (the Python client's "__lock__" names); names with neither are not
// lock nodes and are ignored (zk.Lock refuses them). Only dlock's own
// read-lock names are shared, and only its own permit names are permits:
// every other lock node is exclusive, the safe reading of a node whose
// recipe is unknown.
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
	c := child{name: name, seq: seq}
	if i >= 0 && strings.HasPrefix(name, protectedPrefix) {
		c.shared = strings.HasSuffix(name[:i+len(lockMarker)], readSuffix)
		c.limit = permitLimit(name[:i])
	}
	return c, true
}

// permitLimit returns N when head, a protected node name up to its last
// "lock-", ends as a permit's, "-permit-<N>-", with N from 1 to
// lock.MaxPermits; else 0.
func permitLimit(head string) int {
	head, ok := strings.CutSuffix(head, "-")
	if !ok {
		return 0
	}
	j := strings.LastIndex(head, permitInfix)
	if j < 0 {
		return 0
	}
	digits := head[j+len(permitInfix):]
	if digits == "" || len(digits) > len(strconv.Itoa(lock.MaxPermits)) || strings.Trim(digits, "0123456789") != "" {
		return 0
	}
	n, _ := strconv.Atoi(digits)
	if n < 1 || n > lock.MaxPermits {
		return 0
	}
	return n
}

// verdict is where a lock node stands in its key's queue.
type verdict struct {
	present bool // the node is among the children
	granted bool // nothing before it blocks it
	// watch: when not granted, the earlier nodes to watch (see judge):
	// the node stays blocked while they all exist.
	watch []string
	// conflict, for a permit: the limit of an earlier permit that differs
	// from its own (conflictNode is that node); the attempt is refused.
	conflict     int
	conflictNode string
	// sole: when not granted, the name of the one lock node before it,
	// when exactly one is (empty otherwise). Sequence numbers only grow,
	// so no node can come before it later: once sole is deleted, the
	// node is first, and granted (see waiter.turn).
	sole string
}

// rule is c as internal/queue sees it.
func (c child) rule() queue.Entry {
	switch {
	case c.limit > 0:
		return queue.Entry{Kind: queue.Permit, Limit: c.limit}
	case c.shared:
		return queue.Entry{Kind: queue.Shared}
	}
	return queue.Entry{}
}

// rules is cs as internal/queue sees them.
func rules(cs []child) []queue.Entry {
	out := make([]queue.Entry, len(cs))
	for i, c := range cs {
		out[i] = c.rule()
	}
	return out
}

// judge applies the rule of internal/queue to the children of a key node,
// sorted by their sequence numbers: whether own is granted and, if not,
// the earlier nodes it watches (queue.Watch). Whether a node is granted
// depends on the children alone, never on what another client did or
// announced. A permit is refused when a permit before it was made with
// another N.
//
// A node that waits watches earlier nodes that keep it blocked for as
// long as they all exist, so that only the departure of one of them can be
// its turn, whoever's process is alive: its predecessor (exclusive), the
// nearest earlier node that is not shared (shared), the N permits just
// before it or the non-permit that comes first (a permit). ZooKeeper's
// watches are per node; a children watch would wake every waiter at every
// arrival and departure. A departure thus wakes at most N permit waiters,
// the ones just behind it, and one exclusive or every shared waiter
// behind a writer: never the whole queue. The granted nodes are always a
// prefix of the queue, so grants follow the sequence, and the tokens
// (czxids, which increase with it) of successive grants increase.
func judge(children []string, own string) verdict {
	me, ok := parseChild(own)
	if !ok || !slices.Contains(children, own) {
		return verdict{}
	}
	var before []child // the lock nodes before own, in sequence order
	for _, name := range children {
		if c, ok := parseChild(name); ok && name != own && c.seq < me.seq {
			before = append(before, c)
		}
	}
	slices.SortFunc(before, func(a, b child) int { return cmp.Compare(a.seq, b.seq) })
	v := verdict{present: true}
	// The limit is checked against every permit before it, granted or
	// waiting: those were there when me was created. A permit after it
	// with another limit is refused by its own check.
	for _, c := range before {
		if me.limit > 0 && c.limit > 0 && c.limit != me.limit {
			v.conflict, v.conflictNode = c.limit, c.name
			return v
		}
	}
	q := append(rules(before), me.rule())
	if queue.Granted(q, len(before)) {
		v.granted = true
		return v
	}
	for _, j := range queue.Watch(q, len(before)) {
		v.watch = append(v.watch, before[j].name)
	}
	if len(before) == 1 {
		v.sole = before[0].name
	}
	return v
}
