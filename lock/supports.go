package lock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"
)

// ErrUnsupported: the backend cannot do what was asked (shared leases,
// semaphore permits, re-entry, Resume, Inspect, notes); the message names the
// driver and says why. Nothing was sent to the backend. It also matches
// ErrInvalid, as such refusals did before it existed, and
// errors.ErrUnsupported.
var ErrUnsupported error = unsupported{}

type unsupported struct{}

func (unsupported) Error() string   { return "lock: unsupported" }
func (unsupported) Unwrap() []error { return []error{ErrInvalid, errors.ErrUnsupported} }

// A Capability is something a backend may or may not do (Supports).
// Exclusive leases (Lock, TryLock) are not one: every backend grants them.
type Capability uint8

// The capabilities a backend may lack.
const (
	// SharedLeases: RLock and TryRLock.
	SharedLeases Capability = iota + 1
	// Permits: counting semaphores, Acquire and TryAcquire.
	Permits
	// Reentry: WithOwner, a named owner that may hold a key more than once.
	Reentry
	// Resume: Locker.Resume and Lease.Detach.
	Resume
	// Inspect: Locker.Inspect.
	Inspect
	// Notes: WithNote, a note stored with a grant and shown by Inspect;
	// an Election's Leader and Observe need it, with Inspect.
	Notes
)

func (c Capability) String() string {
	switch c {
	case SharedLeases:
		return "shared leases"
	case Permits:
		return "semaphore permits"
	case Reentry:
		return "re-entry"
	case Resume:
		return "resuming leases"
	case Inspect:
		return "inspecting keys"
	case Notes:
		return "grant notes"
	}
	return fmt.Sprintf("Capability(%d)", uint8(c))
}

// Supports returns nil when the Locker's backend does c, or else the
// error, wrapping ErrUnsupported, with which the methods that need c
// refuse: it names the driver and says why. It makes no I/O.
func (lk *Locker) Supports(c Capability) error {
	if lk == nil {
		return newError("supports", "", ErrInvalid, errNilLocker)
	}
	if err := lk.support(c); err != nil {
		return newError("supports", "", ErrUnsupported, err)
	}
	return nil
}

// support returns nil when the driver does c, or why not, naming the
// driver.
func (lk *Locker) support(c Capability) error {
	var s driver.Support
	switch c {
	case SharedLeases:
		s = lk.caps.Shared
	case Permits:
		s = lk.caps.Permits
	case Reentry:
		s = lk.caps.Reentry
	case Resume:
		s = lk.caps.Resume
		if _, ok := lk.d.(driver.Resumer); s.OK && !ok {
			s = driver.No("its driver has no Resume method")
		}
	case Inspect:
		s = driver.Yes
		if _, ok := lk.d.(driver.Inspector); !ok {
			s = driver.No("its driver cannot tell who holds a key")
		}
	case Notes:
		s = lk.caps.Notes
		if _, ok := lk.d.(driver.Inspector); s.OK && !ok {
			s = driver.No("its driver cannot tell who holds a key")
		}
	default:
		return fmt.Errorf("unknown capability %v", c)
	}
	if s.OK {
		return nil
	}
	return &refusal{driver: lk.name, what: c, why: s.Why}
}

// refusal is why a backend does not do something.
type refusal struct {
	driver string
	what   Capability
	why    string
}

func (r *refusal) Error() string {
	switch {
	case r.why == "":
		return fmt.Sprintf("the %s driver does not declare %v", r.driver, r.what)
	case strings.Contains(r.why, r.driver):
		return r.why
	}
	return r.driver + ": " + r.why
}

// refuse is the error of a call of op on key that needs c, or nil when
// the backend does c.
func (lk *Locker) refuse(op, key string, c Capability) error {
	if err := lk.support(c); err != nil {
		return newError(op, key, ErrUnsupported, err)
	}
	return nil
}

// capsOf returns what d says it does (driver.Capable), with its name
// filled: Caps.Name, or else its type's package name.
func capsOf(d driver.Driver) driver.Caps {
	var c driver.Caps
	if cd, ok := d.(driver.Capable); ok {
		c = cd.Capabilities()
	}
	if c.Name == "" {
		c.Name = packageName(d)
	}
	return c
}
