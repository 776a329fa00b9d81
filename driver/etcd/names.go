package etcd

import (
	"net/url"
	"slices"
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
//	"dlock1 " MODE " " LIMIT " " TOKEN " " SINCE [" " OWNER | (" " HOLD)...] [" #" NOTE]
//
// MODE is x (exclusive), s (shared), p (permit) or o (a named owner's
// grant); LIMIT a permit's semaphore size (0 otherwise); TOKEN the
// fencing token, 0 while the entry waits; SINCE when the entry was
// granted, or queued while it waits, in Unix microseconds of the
// client's clock; OWNER an anonymous entry's owner token (absent from
// an older client's entry, whose NAME is its owner); the HOLDs are a
// named owner's holds (owner tokens); NOTE the grant's note
// (driver.Lease.Note), escaped by escapeNote into one field of graphic
// ASCII after its "#" (see there for what older clients make of it).
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
	note  string // the grant's note (driver.Lease.Note), unescaped
}

func (v entryValue) String() string {
	m := byte('x')
	switch {
	case v.named:
		m = 'o'
	case v.mode == driver.Shared:
		m = 's'
	case v.mode == driver.Permit:
		m = 'p'
	}
	// "dlock1 M LIMIT TOKEN SINCE[ OWNER][ HOLD...][ #NOTE]", built in
	// one buffer (on the stack, for a value that fits): a grant writes
	// one per cycle
	var buf [128]byte
	b := buf[:0]
	b = append(b, "dlock1 "...)
	b = append(b, m, ' ')
	b = strconv.AppendInt(b, int64(v.limit), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, v.token, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, v.since, 10)
	if v.owner != "" {
		b = append(append(b, ' '), v.owner...)
	}
	for _, h := range v.holds {
		b = append(append(b, ' '), h...)
	}
	if v.note != "" {
		b = append(append(append(b, ' '), noteMark...), escapeNote(v.note)...)
	}
	return string(b)
}

// noteMark starts a value's note field. The field is one of graphic
// ASCII (escapeNote), after the owner or the holds, so older clients,
// which split a value at white space, read it as follows. Those of the
// layout before entry names were reused take every field after SINCE as
// a hold: "#..." is no owner token (32 hex digits), so it is nobody's
// hold; on an anonymous entry they ignore holds. Those that put OWNER in
// the value refuse an anonymous value of seven fields: a noted anonymous
// grant is to them a foreign entry, read as exclusive (never theirs to
// release or resume). To both, a noted named owner's grant shows the
// note as one more hold, of no owner: their release of the last real
// hold leaves that entry until its lease expires (TestNoteOlderParsers).
const noteMark = "#"

// escapeNote writes every byte of note outside graphic ASCII, and '%',
// as %XX (upper-case hex), so that the note is one field whatever it
// holds (a note is printable UTF-8, which may have Unicode spaces).
func escapeNote(note string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(note); i++ {
		c := note[i]
		if c <= ' ' || c >= 0x7f || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// splitNote takes the note field out of a value's fields after SINCE
// (an older client may have put holds after it): it returns the rest,
// the note, and whether the field, if any, was well escaped.
func splitNote(f []string) (rest []string, note string, ok bool) {
	i := slices.IndexFunc(f, func(s string) bool { return strings.HasPrefix(s, noteMark) })
	if i < 0 {
		return f, "", true
	}
	note, err := url.PathUnescape(f[i][len(noteMark):])
	if err != nil || note == "" {
		return nil, "", false
	}
	return slices.Delete(slices.Clone(f), i, i+1), note, true
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
	rest, note, ok := splitNote(f[5:])
	if !ok {
		return v, false
	}
	v.note = note
	switch {
	case v.named:
		v.holds = rest
	case len(rest) == 1 && driver.IsOwner(rest[0]):
		v.owner = rest[0]
	case len(rest) > 0:
		return v, false
	}
	return v, true
}
