package driver

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotAtomic: the backend cannot take this set of keys in one step (a
// Redis cluster whose keys are in different slots, say). The attempt made
// no I/O and changed nothing; lock then takes the keys one by one.
var ErrNotAtomic = errors.New("driver: set cannot be taken in one step")

// SetAcquirer takes a set of keys all or none in one backend step (one
// script, one transaction, one multi). If a Driver does not implement
// SetAcquirer, lock's LockMany and TryLockMany take the keys one by one,
// in sorted order, releasing those taken when one cannot be.
type SetAcquirer interface {
	// AcquireSet makes one attempt to grant every lease of ls, all or
	// none. lock passes 2 or more leases (up to lock's MaxKeys) of
	// distinct keys in sorted order, each Exclusive, without Reentry or Note, of
	// one TTL, each with its own Owner, each checked by Validate.
	//
	// It grants the set only where Acquire would grant each lease at
	// that moment (a key held, or, where the driver queues, one whose
	// queue has waiters, is not taken: a set does not pass earlier
	// waiters). On success it fills every lease as Acquire does (Token,
	// Validity counted from the start of the call, Data) and returns nil.
	// When any key is held it returns an error wrapping ErrHeld and leaves
	// nothing behind. When the backend cannot take this set in one step it
	// returns an error wrapping ErrNotAtomic before any I/O.
	//
	// When it fails otherwise (ctx ended, reply lost), the outcome is
	// unknown: lock then calls Release for every lease of ls, which must
	// remove each grant that was applied without the caller learning it.
	AcquireSet(ctx context.Context, ls []*Lease) error
}

// CheckSet checks the leases AcquireSet is given: at least one, none nil,
// each Exclusive and without Reentry or Note, no key twice. A
// SetAcquirer calls it before anything else and returns its error
// (wrapping ErrInvalid); lock never passes such a set, but other callers
// of a driver may.
func CheckSet(ls []*Lease) error {
	if len(ls) == 0 {
		return fmt.Errorf("%w: an empty set", ErrInvalid)
	}
	seen := make(map[string]bool, len(ls))
	for _, l := range ls {
		switch {
		case l == nil:
			return fmt.Errorf("%w: a nil lease in a set", ErrInvalid)
		case l.Mode != Exclusive || l.Reentry || l.Note != "":
			return fmt.Errorf("%w: a set's leases are exclusive, without re-entry or note (key %q)", ErrInvalid, l.Key)
		case seen[l.Key]:
			return fmt.Errorf("%w: key %q given twice in a set", ErrInvalid, l.Key)
		}
		seen[l.Key] = true
	}
	return nil
}
