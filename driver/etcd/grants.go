package etcd

import (
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/queue"
)

// entry is one key under a lock key's queue prefix, as read.
type entry struct {
	name          string // after the queue prefix
	create, mod   int64  // revisions
	lease         int64
	v             entryValue
	foreign       bool // not written by dlock (a concurrency.Mutex's key)
	dlockAnon     bool // an anonymous dlock entry (see owner)
	dlockNamed    bool // a named owner's grant
	modeForGrants driver.Mode
}

// owner is an anonymous or foreign entry's owner: the one its value
// names, else (an older client's entry, a foreign one) its name.
func (e entry) owner() string {
	if e.v.owner != "" {
		return e.v.owner
	}
	return e.name
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

// rule is an entry of mode and limit as internal/queue sees it.
func rule(mode driver.Mode, limit int) queue.Entry {
	switch mode {
	case driver.Shared:
		return queue.Entry{Kind: queue.Shared}
	case driver.Permit:
		return queue.Entry{Kind: queue.Permit, Limit: limit}
	}
	return queue.Entry{}
}

// rules is ahead, and an entry of mode and limit behind it, as
// internal/queue sees them.
func rules(ahead []entry, mode driver.Mode, limit int) []queue.Entry {
	q := make([]queue.Entry, 0, len(ahead)+1)
	for _, e := range ahead {
		q = append(q, rule(e.modeForGrants, e.v.limit))
	}
	return append(q, rule(mode, limit))
}

// turn reports whether an entry of mode and limit, with ahead before it
// in the queue, is granted by the rule of internal/queue. Whether an
// entry is granted depends on the queue alone, never on another client
// acting: a waiter the rule grants counts as a holder whether or not it
// has written its token yet.
func turn(ahead []entry, mode driver.Mode, limit int) bool {
	return queue.Granted(rules(ahead, mode, limit), len(ahead))
}

// maxPermitWatches is the most entries a permit waiter watches one by
// one; when it is to watch more, it watches the whole queue.
const maxPermitWatches = 16

// blockers are the entries (names) whose departure may be the turn of an
// entry of mode and limit with ahead before it, when it is not its turn
// (queue.Watch): the entry just before it (exclusive), the nearest
// earlier non-shared one (shared), and for a permit the limit permits
// just before it, or the nearest earlier non-permit when it comes first.
// all is set when they are too many to watch one by one.
func blockers(ahead []entry, mode driver.Mode, limit int) (names []string, all bool) {
	idx := queue.Watch(rules(ahead, mode, limit), len(ahead))
	if len(idx) > maxPermitWatches {
		return nil, true
	}
	for _, i := range idx {
		names = append(names, ahead[i].name)
	}
	return names, false
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
