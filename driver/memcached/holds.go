package memcached

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
)

// Holds of a named owner (lock.WithOwner, driver.Lease.Reentry) live in
// the lock item itself, updated by cas:
//
//	H FIRST TOKEN OWNER:SECS OWNER:SECS ...
//
// FIRST is the owner token of the grant's first hold (every token of one
// named owner starts with the same 16 hex digits), TOKEN its fencing
// token, and each OWNER:SECS a hold with its TTL in seconds. The item's
// expiration is always set to the longest TTL of its holds, from the
// moment of the cas: each hold's deadline counts from its own last grant
// or refresh, which was no later, so no hold's deadline outlives the item,
// and no clock but the server's is needed. A first grant is an add of the
// bare owner token, as for any lease, then the incr of the token, then a
// cas that writes the holds: until that cas a re-entry finds the key held.

// A grant's note (driver.Lease.Note) ends the lock item's value, after
// noteSep: "OWNER\n:0 NOTE" for an anonymous grant, "H FIRST TOKEN
// OWNER:SECS ...\n:0 NOTE" for a named owner's (its first hold's note: a
// re-entry keeps it). The add that grants writes it, and every cas keeps
// it. A note is printable (lock checks it), so it holds no newline. An
// older version compares the whole value with its owner token (a noted
// grant is never its own) and parses holds with strings.Fields, which
// refuses the field ":0" (no owner, no seconds): it sees a noted grant
// as a foreign value, which it neither re-enters nor releases.
const noteSep = "\n:0 "

// withNote returns v followed by note (none when note is empty).
func withNote(v []byte, note string) []byte {
	if note == "" {
		return v
	}
	return append(append(v, noteSep...), note...)
}

// splitNote splits a lock item's value into the grant's value and its
// note ("" when it has none).
func splitNote(v []byte) ([]byte, string) {
	head, note, ok := bytes.Cut(v, []byte(noteSep))
	if !ok {
		return v, ""
	}
	return head, string(note)
}

// holdsMark starts the value of a named owner's grant.
const holdsMark = "H "

type hold struct {
	owner string
	secs  int32
}

// holdsValue is the parsed value of a named owner's grant.
type holdsValue struct {
	first string
	token uint64
	holds []hold
}

// parseHolds parses v, reporting false for any other value (a bare owner
// token: an anonymous grant, or a first hold not yet recorded).
func parseHolds(v []byte) (holdsValue, bool) {
	var h holdsValue
	rest, ok := bytes.CutPrefix(v, []byte(holdsMark))
	if !ok {
		return h, false
	}
	f := strings.Fields(string(rest))
	if len(f) < 2 {
		return h, false
	}
	var err error
	if h.token, err = strconv.ParseUint(f[1], 10, 64); err != nil || h.token == 0 {
		return h, false
	}
	h.first = f[0]
	for _, s := range f[2:] {
		o, secs, ok := strings.Cut(s, ":")
		n, err := strconv.ParseInt(secs, 10, 32)
		if !ok || err != nil || n <= 0 {
			return h, false
		}
		h.holds = append(h.holds, hold{o, int32(n)})
	}
	return h, true
}

func (h *holdsValue) bytes() []byte {
	b := make([]byte, 0, len(holdsMark)+len(h.first)+21+len(h.holds)*44)
	b = append(b, holdsMark...)
	b = append(b, h.first...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, h.token, 10)
	for _, o := range h.holds {
		b = append(b, ' ')
		b = append(b, o.owner...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(o.secs), 10)
	}
	return b
}

// find returns the index of owner's hold, or -1.
func (h *holdsValue) find(owner string) int {
	for i, o := range h.holds {
		if o.owner == owner {
			return i
		}
	}
	return -1
}

// expiration is the longest TTL of the holds.
func (h *holdsValue) expiration() int32 {
	var m int32
	for _, o := range h.holds {
		m = max(m, o.secs)
	}
	return m
}

// acquireHold makes one attempt at a hold of l's named owner: add, incr
// and cas for a first hold; add (refused), gets and cas for a re-entry.
func (d *mcDriver) acquireHold(ctx context.Context, c *memcache.Client, l *driver.Lease, k keys, secs int32) error {
	err := c.Add(&memcache.Item{Key: k.lock, Value: withNote([]byte(l.Owner), l.Note), Expiration: secs})
	switch {
	case err == nil:
		if err := ctx.Err(); err != nil {
			return err // lock releases the grant by owner
		}
		token, err := nextToken(c, k.counter)
		if err != nil {
			return err
		}
		// Record the first hold. Nothing else changes a bare owner
		// token; a miss means the grant expired meanwhile.
		h := holdsValue{first: l.Owner, token: token, holds: []hold{{l.Owner, secs}}}
		err = casHolds(ctx, c, "grant", k.lock, func(v []byte) (*holdsValue, error) {
			if string(v) != l.Owner {
				return nil, driver.ErrNotHeld
			}
			return &h, nil
		})
		if errors.Is(err, driver.ErrNotHeld) {
			return &driver.HeldError{}
		}
		if err != nil {
			return err
		}
		l.Token, l.Validity, l.Data = token, validity(secs), k
		return nil
	case !errors.Is(err, memcache.ErrNotStored):
		return fmt.Errorf("memcached add: %w", err)
	}
	// Held: a re-entry if the holder is a hold of the same named owner.
	var token uint64
	err = casHolds(ctx, c, "grant", k.lock, func(v []byte) (*holdsValue, error) {
		h, ok := parseHolds(v)
		if !ok || !driver.SameOwner(h.first, l.Owner) {
			return nil, driver.ErrHeld
		}
		if i := h.find(l.Owner); i >= 0 {
			h.holds[i].secs = secs
		} else {
			h.holds = append(h.holds, hold{l.Owner, secs})
		}
		token = h.token
		return &h, nil
	})
	switch {
	case errors.Is(err, driver.ErrHeld), errors.Is(err, driver.ErrNotHeld): // held by another, or gone
		return &driver.HeldError{}
	case err != nil:
		return err
	}
	l.Token, l.Validity, l.Data = token, validity(secs), k
	return nil
}

// releaseHold removes l's hold, and deletes the grant with its last one
// (or when the item still holds l's bare owner token: a first hold whose
// holds were never recorded).
func (d *mcDriver) releaseHold(ctx context.Context, c *memcache.Client, l *driver.Lease) error {
	return casHolds(ctx, c, "release", d.leaseKeys(l).lock, func(v []byte) (*holdsValue, error) {
		if string(v) == l.Owner {
			return nil, nil
		}
		h, ok := parseHolds(v)
		if !ok || !driver.SameOwner(h.first, l.Owner) {
			return nil, driver.ErrNotHeld
		}
		i := h.find(l.Owner)
		if i < 0 {
			return nil, driver.ErrNotHeld
		}
		h.holds = append(h.holds[:i], h.holds[i+1:]...)
		if len(h.holds) == 0 {
			return nil, nil
		}
		return &h, nil
	})
}

// extendHold sets the TTL of l's hold to the larger of its TTL and secs,
// and the item's expiration to the longest of its holds'; with token not 0
// (a Resume), only if the grant's token is token. The item's expiration is
// never shortened: another Lease of the hold (one that resumed it, or
// whose handle was resumed) may count on it.
func (d *mcDriver) extendHold(ctx context.Context, c *memcache.Client, op string, l *driver.Lease, secs int32, token uint64) error {
	return casHolds(ctx, c, op, d.leaseKeys(l).lock, func(v []byte) (*holdsValue, error) {
		h, ok := parseHolds(v)
		if !ok || !driver.SameOwner(h.first, l.Owner) || (token != 0 && h.token != token) {
			return nil, driver.ErrNotHeld
		}
		i := h.find(l.Owner)
		if i < 0 {
			return nil, driver.ErrNotHeld
		}
		h.holds[i].secs = max(h.holds[i].secs, secs)
		return &h, nil
	})
}

// casHolds updates the item key by cas (see casItem) to what change makes
// of its value, the grant's note set apart (nil: delete it); change's
// error (driver.ErrHeld, driver.ErrNotHeld) is returned as it is, with
// the item left alone. The note is kept.
func casHolds(ctx context.Context, c *memcache.Client, op, key string, change func(v []byte) (*holdsValue, error)) error {
	return casItem(ctx, c, op, key, func(it *memcache.Item) error {
		v, note := splitNote(it.Value)
		h, err := change(v)
		switch {
		case err != nil:
			return err
		case h == nil:
			it.Expiration = -1 // memcached applies it as an immediate expiry
		default:
			it.Value, it.Expiration = withNote(h.bytes(), note), h.expiration()
		}
		return nil
	})
}
