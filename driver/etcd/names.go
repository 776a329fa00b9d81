package etcd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"
)

// The keys and values this driver writes (docs/wire/etcd.md is the same
// description):
//
//	PREFIX "q/" esc(K) "/" NAME         an anonymous attempt's entry: its
//	                                    waiting place, then its grant
//	PREFIX "q/" esc(K) "/o-" OWNER16     a named owner's grant (its holds in
//	                                    the value)
//	PREFIX "c/" esc(K)                   the key's fencing counter: the last
//	                                    token, in decimal; no lease
//
// NAME is 32 hex digits: the Locker's 24 (random, made with it) and a
// slot's 8. An attempt takes the lowest slot of K that no other attempt
// of its Locker holds (slots.go), and gives it back once nothing it
// wrote can be left or land later, so a Locker's grants of K reuse a few
// names: etcd keeps a deleted name in its index until a compaction, and
// every range over the queue visits it. A reused name is not a grant's
// identity: its create revision is (the generation), and every request
// that acts on a known grant compares it. Clients before this layout
// named an entry by its owner token (NAME = OWNER): both are read alike.
//
// Every entry is attached to an etcd lease of its own (one per attempt),
// so it goes when the lease expires. The entries of K are ordered by
// their create revision: that order is the queue, and the grant rule
// (grants.go) reads it alone. An entry's value is
//
//	"dlock1 " MODE " " LIMIT " " TOKEN " " SINCE [" " OWNER | (" " HOLD)...]
//
// MODE is x (exclusive), s (shared), p (permit) or o (a named owner's
// grant); LIMIT a permit's semaphore size (0 otherwise); TOKEN the
// fencing token, 0 while the entry waits; SINCE when the entry was
// granted, or queued while it waits, in Unix microseconds of the
// client's clock; OWNER an anonymous entry's owner token (absent from
// an older client's entry, whose NAME is its owner); the HOLDs are a
// named owner's holds (owner tokens).
// A key under the queue prefix that dlock did not write (a
// concurrency.Mutex's PFX "/" LEASEHEX key) is a foreign entry, read as
// exclusive: so with MutexPrefix(K) as its prefix, a concurrency.Mutex
// and dlock exclude each other.

// escape writes '%' and '/' in k as %25 and %2F, so that no key's queue
// prefix is a prefix of another's, and the mapping is injective.
func escape(k string) string {
	if !strings.ContainsAny(k, "%/") {
		return k
	}
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// names are one key's etcd keys.
type names struct {
	queue   string // the entries' prefix, ending in "/"
	counter string
}

func (d *etcdDriver) names(key string) names {
	e := escape(key)
	return names{queue: d.prefix + "q/" + e + "/", counter: d.prefix + "c/" + e}
}

// namedEntry is the name, under the queue prefix, of a named owner's
// grant.
func namedEntry(l *driver.Lease) string {
	return "o-" + l.Owner[:driver.NamedOwnerLen]
}

// entryValue is what an entry holds (see the layout above).
type entryValue struct {
	mode  driver.Mode
	named bool
	limit int
	token uint64
	since int64  // Unix µs
	owner string // an anonymous entry's owner ("": an older client's, named by its owner)
	holds []string
}

func (v entryValue) String() string {
	m := "x"
	switch {
	case v.named:
		m = "o"
	case v.mode == driver.Shared:
		m = "s"
	case v.mode == driver.Permit:
		m = "p"
	}
	s := fmt.Sprintf("dlock1 %s %d %d %d", m, v.limit, v.token, v.since)
	if v.owner != "" {
		s += " " + v.owner
	}
	for _, h := range v.holds {
		s += " " + h
	}
	return s
}

// parseValue reads an entry's value; ok is false for a value dlock did
// not write.
func parseValue(s string) (v entryValue, ok bool) {
	f := strings.Fields(s)
	if len(f) < 5 || f[0] != "dlock1" {
		return v, false
	}
	switch f[1] {
	case "x":
	case "s":
		v.mode = driver.Shared
	case "p":
		v.mode = driver.Permit
	case "o":
		v.named = true
	default:
		return v, false
	}
	lim, err1 := strconv.Atoi(f[2])
	tok, err2 := strconv.ParseUint(f[3], 10, 64)
	since, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return v, false
	}
	v.limit, v.token, v.since = lim, tok, since
	switch {
	case v.named:
		v.holds = f[5:]
	case len(f) == 6 && driver.IsOwner(f[5]):
		v.owner = f[5]
	case len(f) > 5:
		return v, false
	}
	return v, true
}
