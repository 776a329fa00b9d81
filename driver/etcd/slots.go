package etcd

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/dlock-go/dlock/driver"
)

// An anonymous attempt's entry is named by its Locker's id and a slot
// (names.go): the lowest slot of the key that no other attempt of the
// Locker holds, so that a Locker's grants of a key reuse a few names and
// etcd's index does not fill with deleted ones between compactions. A
// Locker holding several entries of one key at once (shared leases,
// permits, a wait beside a grant) holds as many slots.
//
// A slot goes back only when nothing its attempt wrote can be left or
// land later: the attempt ended with no grant and its leases are
// revoked or kept as unused spares, or its release or Leave went
// through, or its holder watch saw the grant's entry deleted. Safety does
// not rest on this bookkeeping: every request on a known grant compares
// its entry's create revision (grantRef), and one that does not know it
// (a clean-up after a lost reply) reads the entry's owner first.

// slotKey is one slot of one lock key.
type slotKey struct {
	key  string
	slot uint32
}

// held is the slot an attempt holds, and its name.
type held struct {
	slotKey
	name string
}

// burnt marks a slot taken by no attempt that is never given out again:
// its name was found in use by an entry that is not the attempt's.
const burnt = ""

// newLockerID returns a Locker's id: 24 random hex digits.
func newLockerID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail (Go 1.24)
	}
	return hex.EncodeToString(b[:])
}

// slotName is the entry name of slot s: the Locker's id, then s in 8
// hex digits.
func (d *etcdDriver) slotName(s uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 32)
	b = append(b, d.id...)
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, digits[s>>shift&0xf])
	}
	return string(b)
}

// reserve returns the entry name of l's attempt: a named owner's, or the
// slot its owner holds on l.Key, or the lowest free one, now held.
func (d *etcdDriver) reserve(l *driver.Lease) string {
	if l.Reentry {
		return namedEntry(l)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if h, ok := d.slotOf[l.Owner]; ok && h.key == l.Key {
		return h.name
	}
	return d.take(l.Key, l.Owner)
}

// take holds the lowest free slot of key for owner. d.mu is held.
func (d *etcdDriver) take(key, owner string) string {
	sk := slotKey{key: key}
	for {
		if _, used := d.slotUsers[sk]; !used {
			break
		}
		sk.slot++
	}
	name := d.slotName(sk.slot)
	d.slotUsers[sk] = owner
	d.slotOf[owner] = held{sk, name}
	return name
}

// burn gives owner, whose slot's name was found in use by an entry not
// its attempt's, another slot of key; the first is never given out again.
func (d *etcdDriver) burn(key, owner string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h, ok := d.slotOf[owner]; ok {
		d.slotUsers[h.slotKey] = burnt
	}
	return d.take(key, owner)
}

// reserved returns the entry name owner's attempt holds on key.
func (d *etcdDriver) reserved(key, owner string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.slotOf[owner]
	if !ok || h.key != key {
		return "", false
	}
	return h.name, true
}

// unreserve gives owner's slot back: nothing its attempt wrote is left
// or can land later.
func (d *etcdDriver) unreserve(owner string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.slotOf[owner]
	if !ok {
		return
	}
	delete(d.slotOf, owner)
	if d.slotUsers[h.slotKey] == owner {
		delete(d.slotUsers, h.slotKey)
	}
}

// grantRef is a grant's entry, in driver.Lease.Data: its name, the
// lease the grant was made (or resumed) with, and its create revision,
// which tells this grant from an earlier or later one under the name.
type grantRef struct {
	name          string
	lease, create int64
}

// entryOf returns the name of l's entry, and its create revision when
// l's grant is known (0 otherwise); ok is false when this Locker knows of
// no entry of l's.
func (d *etcdDriver) entryOf(l *driver.Lease) (name string, create int64, ok bool) {
	if ref, isRef := l.Data.(grantRef); isRef {
		return ref.name, ref.create, true
	}
	if l.Reentry {
		return namedEntry(l), 0, true
	}
	name, ok = d.reserved(l.Key, l.Owner)
	return name, 0, ok
}
