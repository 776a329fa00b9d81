package etcd

import (
	"github.com/dlock-go/dlock/driver"
)

// entry is one key under a lock key's queue prefix, as read.
type entry struct {
	name          string // after the queue prefix
	create, mod   int64  // revisions
	lease         int64
	v             entryValue
	foreign       bool // not written by dlock (a concurrency.Mutex's key)
	dlockAnon     bool // an anonymous dlock entry (its name is its owner)
	dlockNamed    bool // a named owner's grant
	modeForGrants driver.Mode
}

// state is what one read of a lock key found: its entries in create
// revision order (the queue), and its counter.
type state struct {
	rev        int64 // the read's revision
	entries    []entry
	counter    uint64
	counterMod int64 // 0: no counter
}

// find returns the index of the entry named name, or -1.
func (s *state) find(name string) int {
	for i, e := range s.entries {
		if e.name == name {
			return i
		}
	}
	return -1
}

// turn reports whether an entry of mode and limit, with ahead before it
// in the queue, is granted by the rule: exclusive when first; shared when
// only shared entries are ahead; a permit when only permits are ahead
// and fewer than limit of them. Whether an entry is granted depends on
// the queue alone, never on another client acting: a waiter the rule
// grants counts as a holder whether or not it has written its token yet.
func turn(ahead []entry, mode driver.Mode, limit int) bool {
	switch mode {
	case driver.Shared:
		for _, e := range ahead {
			if e.modeForGrants != driver.Shared {
				return false
			}
		}
		return true
	case driver.Permit:
		for _, e := range ahead {
			if e.modeForGrants != driver.Permit {
				return false
			}
		}
		return len(ahead) < limit
	}
	return len(ahead) == 0
}

// maxPermitWatches is the most entries a permit waiter watches one by
// one; with a larger limit it watches the whole queue.
const maxPermitWatches = 16

// blockers are the entries (names) whose departure may be the turn of an
// entry of mode and limit with ahead before it, when it is not its turn:
// the entry just before it (exclusive), the nearest earlier non-shared
// one (shared), and for a permit the nearest earlier non-permit, or, when
// all ahead are permits, the limit permits just before it (its turn
// needs departures among them: len(ahead)-limit+1 departures cannot all
// be among the others). all is set when they are too many to watch one
// by one.
func blockers(ahead []entry, mode driver.Mode, limit int) (names []string, all bool) {
	switch mode {
	case driver.Shared:
		for i := len(ahead) - 1; i >= 0; i-- {
			if ahead[i].modeForGrants != driver.Shared {
				return []string{ahead[i].name}, false
			}
		}
		return nil, false
	case driver.Permit:
		for i := len(ahead) - 1; i >= 0; i-- {
			if ahead[i].modeForGrants != driver.Permit {
				return []string{ahead[i].name}, false
			}
		}
		if limit > maxPermitWatches {
			return nil, true
		}
		for i := len(ahead) - 1; i >= 0 && len(names) < limit; i-- {
			names = append(names, ahead[i].name)
		}
		return names, false
	}
	if len(ahead) == 0 {
		return nil, false
	}
	return []string{ahead[len(ahead)-1].name}, false
}

// otherLimit returns the limit of a live permit entry other than skip
// whose limit is not limit, or 0.
func otherLimit(es []entry, limit int, skip string) int {
	for _, e := range es {
		if e.name != skip && e.modeForGrants == driver.Permit && e.v.limit != limit {
			return e.v.limit
		}
	}
	return 0
}

// nextToken is the token of a grant: max(counter + 1, the clock in µs),
// the Redis and PostgreSQL drivers' scale.
func nextToken(counter uint64, nowMicros int64) uint64 {
	return max(counter+1, uint64(max(nowMicros, 0)))
}
