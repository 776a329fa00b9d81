// Package queue is the rule that decides who holds a key among the entries
// of its queue, for every driver that queues: one place for it in Go, and
// the description of what the Lua (redisnx), the WATCH transactions
// (rediswatch) and the PL/pgSQL (postgres) do. One table of cases runs
// against each of them: internal/testsupport/queuetest.
//
// # The rule
//
// A key's queue is its entries in arrival order, granted ones and waiting
// ones alike. Whether an entry is granted depends on the entries before it
// alone:
//
//   - an exclusive entry is granted when it is first;
//   - a shared entry when every entry before it is shared: a shared entry
//     behind a waiting writer waits, so readers that come later never
//     overtake a writer;
//   - a permit of a semaphore of N when every entry before it is a permit
//     of N, and fewer than N are. A permit behind a shared entry waits, and
//     so does a shared entry behind a permit.
//
// Granted entries are therefore always a prefix of the queue, and grants
// follow arrival order. A permit whose limit differs from an earlier
// permit's is never granted: every backend refuses the attempt that brings
// a second limit (Conflict; driver.ErrInvalid), so such a queue does not
// arise; were it to, ZooKeeper refuses the permit at its check and Redis
// leaves it waiting, which both read as not granted.
//
// How each backend keeps the queue: memory, ZooKeeper (sequential nodes),
// etcd (keys in create-revision order) and PostgreSQL (rows in seq order)
// keep granted entries in it; the Redis drivers keep only waiters in it
// and the granted entries in the lock key (an owner, "R" and its readers,
// "SN" and its permits), which stand for the granted prefix.
//
// # Waking
//
// Watch names the entries whose departure may be a waiting entry's turn;
// it stays blocked while they all exist. HandOver names the entries that
// a departure grants: the ones a release hands the key to, or wakes.
package queue

// Kind is an entry's mode.
type Kind uint8

const (
	Exclusive Kind = iota
	Shared
	Permit
)

func (k Kind) String() string {
	switch k {
	case Shared:
		return "shared"
	case Permit:
		return "permit"
	}
	return "exclusive"
}

// Entry is one entry of a key's queue: its kind, and for a permit its
// semaphore's limit (ignored for other kinds).
type Entry struct {
	Kind  Kind
	Limit int
}

// Granted reports whether q[i] is granted by the rule (see the package
// doc). It is false when i is out of range.
func Granted(q []Entry, i int) bool {
	if i < 0 || i >= len(q) {
		return false
	}
	e := q[i]
	switch e.Kind {
	case Shared:
		for _, b := range q[:i] {
			if b.Kind != Shared {
				return false
			}
		}
		return true
	case Permit:
		for _, b := range q[:i] {
			if b.Kind != Permit || b.Limit != e.Limit {
				return false
			}
		}
		return i < e.Limit
	}
	return i == 0
}

// Holders returns how many entries at the head of q are granted: the
// granted prefix.
func Holders(q []Entry) int {
	n := 0
	for n < len(q) && Granted(q, n) {
		n++
	}
	return n
}

// Conflict returns the limit of a permit in q other than e's when e is a
// permit, else 0: an attempt at e is refused (driver.ErrInvalid).
func Conflict(q []Entry, e Entry) int {
	if e.Kind != Permit {
		return 0
	}
	for _, b := range q {
		if b.Kind == Permit && b.Limit != e.Limit {
			return b.Limit
		}
	}
	return 0
}

// Watch returns the indices, in queue order, of the entries before q[i]
// that keep it waiting as long as they all exist, so that only the
// departure of one of them can be its turn; nil when q[i] is granted (or
// i is out of range):
//
//   - an exclusive entry watches the one just before it;
//   - a shared entry, the nearest earlier entry that is not shared;
//   - a permit of N, the N permits just before it, or, when an entry that
//     is not a permit of N comes first, that entry alone.
//
// A permit needs N watches because any N departures before it may be its
// turn; a departure thus wakes at most N permits, the ones just behind it.
func Watch(q []Entry, i int) []int {
	if Granted(q, i) || i < 0 || i >= len(q) {
		return nil
	}
	e := q[i]
	switch e.Kind {
	case Shared:
		for j := i - 1; j >= 0; j-- {
			if q[j].Kind != Shared {
				return []int{j}
			}
		}
		return nil
	case Permit:
		var w []int
		for j := i - 1; j >= 0 && len(w) < e.Limit; j-- {
			if q[j].Kind != Permit || q[j].Limit != e.Limit {
				return []int{j}
			}
			w = append(w, j)
		}
		for a, b := 0, len(w)-1; a < b; a, b = a+1, b-1 {
			w[a], w[b] = w[b], w[a]
		}
		return w
	}
	return []int{i - 1}
}

// HandOver returns the indices, in q, of the entries that the departure
// of q[i] grants: waiting before, granted once q[i] is gone. A release
// hands the key to them (or wakes them).
func HandOver(q []Entry, i int) []int {
	if i < 0 || i >= len(q) {
		return nil
	}
	after := make([]Entry, 0, len(q)-1)
	after = append(after, q[:i]...)
	after = append(after, q[i+1:]...)
	var out []int
	for j := Holders(q); j < len(q); j++ {
		if j == i {
			continue
		}
		k := j
		if j > i {
			k = j - 1
		}
		if !Granted(after, k) {
			break
		}
		out = append(out, j)
	}
	return out
}
