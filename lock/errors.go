package lock

import (
	"context"
	"errors"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
)

// Sentinel errors. Every error returned by this package and its drivers wraps
// at most a few of them; check with errors.Is, never by comparing strings.
var (
	// ErrNotAcquired: Lock or TryLock did not get the key: it was held,
	// the retry strategy gave up, the context ended (the error then also
	// wraps ctx.Err()) or the backend failed (the error also wraps that).
	ErrNotAcquired = errors.New("lock: not acquired")
	// ErrNotHeld: Unlock or Refresh found that the caller's grant is gone
	// (expired, released, deleted, or taken by another owner). Nothing was
	// changed on the backend.
	ErrNotHeld = errors.New("lock: not held")
	// ErrLost: reported by Lease.Err after Done closed because the lease was
	// lost (expired locally before a refresh succeeded, the backend said it
	// is gone, or the driver learned so, e.g. a ZooKeeper session expired).
	ErrLost = errors.New("lock: lease lost")
	// ErrClosed: the Locker was closed.
	ErrClosed = errors.New("lock: locker closed")
	// ErrInvalid: the input (key, TTL, option, URL, or a nil or zero value
	// such as a nil context or Lease) was refused before any I/O. The
	// message says why.
	ErrInvalid = errors.New("lock: invalid input")
	// ErrHeld: beside ErrNotAcquired, when the key was held by another
	// owner at the last attempt (TryLock, or Lock whose retry strategy gave
	// up). Its absence from an ErrNotAcquired error means the backend failed
	// or the context ended.
	ErrHeld = errors.New("lock: held by another owner")
	// ErrUnavailable: beside ErrNotAcquired, when the backend could not be
	// reached (a connection refused, lost or timed out): a Try call found
	// it so, or a waiting call's context ended during the outage, or its
	// retry strategy gave up. The error also wraps the client's error.
	ErrUnavailable = errors.New("lock: backend unavailable")
)

// unavailableError is the cause for an unreachable backend:
// ErrUnavailable, with the driver's error.
type unavailableError struct{ err error }

func (e unavailableError) Error() string   { return "backend unavailable: " + e.err.Error() }
func (e unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// notAcquiredCause is the cause of an ErrNotAcquired after an attempt
// that failed with err: ErrHeld or ErrUnavailable beside it, or err alone.
func notAcquiredCause(err error) error {
	switch {
	case errors.Is(err, driver.ErrUnavailable):
		return unavailableError{err}
	case errors.Is(err, driver.ErrHeld):
		return heldError{err}
	}
	return err
}

// heldError is the cause for a held key: ErrHeld, with the driver's error
// (which may say when the key frees up).
type heldError struct{ err error }

func (e heldError) Error() string   { return e.err.Error() }
func (e heldError) Unwrap() []error { return []error{ErrHeld, e.err} }

// Error is the error type returned by Locker and Lease methods: the
// operation, the key, and the causes. errors.Is sees through it to the
// sentinel and to the backend's or the context's error.
type Error struct {
	Op string // "lock", "trylock", "unlock", "refresh", "renew", ...
	// Key is the key whole; Error's message quotes at most 128 bytes of it.
	Key string
	// Kind is the sentinel: ErrNotAcquired, ErrNotHeld, ErrLost, ErrClosed
	// or ErrInvalid; nil when only the cause is known (a backend failure in
	// Unlock or Refresh, which says nothing about whether the lease holds).
	Kind error
	// Err is the cause, if any: a backend error, ctx.Err(), a reason.
	Err error
}

func (e *Error) Error() string {
	kind := "lock"
	if e.Kind != nil {
		kind = e.Kind.Error()
	}
	msg := kind + ": " + e.Op
	if e.Key != "" {
		msg += " " + errtext.Quote(e.Key)
	}
	cause, causeKind := e.Err, e.Kind
	if inner, ok := e.Err.(*Error); ok && inner.Key == e.Key {
		// An error of the same key (how the lease ended, say): its kind
		// if it differs, and its cause, without saying the key again.
		if inner.Kind != nil && inner.Kind != e.Kind {
			msg += ": " + inner.Kind.Error() + " (" + inner.Op + ")"
		}
		if inner.Kind != nil {
			causeKind = inner.Kind
		}
		cause = inner.Err
	}
	if cause != nil {
		if text := causeText(causeKind, cause); text != "" {
			msg += ": " + text
		}
	}
	return msg
}

// driverWords puts the driver package's sentinels in this package's words:
// "driver:" names an interface users never see. A wrapped ErrNotHeld
// ("zookeeper: session 0x1 ended: driver: lease not held") is dropped: the
// text before it says so.
var driverWords = strings.NewReplacer(
	": "+driver.ErrNotHeld.Error(), "",
	driver.ErrInvalid.Error(), "invalid input",
	driver.ErrNotHeld.Error(), "not held",
	driver.ErrHeld.Error(), "held by another owner",
)

// causeText is err's message as an *Error of kind shows it: the driver's
// sentinels in this package's words, and without what kind already says
// (no "lock: invalid input: lock "k": driver: invalid input: TTL ...").
// The error itself is unchanged, so errors.Is and errors.As still see
// every sentinel and type it wraps.
func causeText(kind, err error) string {
	s := driverWords.Replace(err.Error())
	if kind == nil {
		return s
	}
	word := strings.TrimPrefix(kind.Error(), "lock: ")
	s = strings.ReplaceAll(s, kind.Error()+": ", "")
	switch {
	case s == word || s == kind.Error():
		return ""
	case strings.HasPrefix(s, word+": "):
		return s[len(word)+2:]
	case strings.HasSuffix(s, ": "+word):
		return s[:len(s)-len(word)-2]
	}
	return s
}

// Unwrap returns the sentinel and the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func newError(op, key string, kind, cause error) error {
	return &Error{Op: op, Key: key, Kind: kind, Err: cause}
}

// driverError maps an error from a driver call to an *Error whose Kind is
// one of this package's sentinels, or other when the driver's error is not
// one of the driver sentinels that have a match here.
func driverError(op, key string, err error, other error) error {
	switch {
	case errors.Is(err, driver.ErrInvalid):
		return newError(op, key, ErrInvalid, err)
	case errors.Is(err, driver.ErrNotHeld):
		return newError(op, key, ErrNotHeld, err)
	}
	return newError(op, key, other, err)
}

// ctxError is the error for a call whose context ended: it wraps kind and
// ctx.Err(), and the cancellation cause when there is a distinct one (for
// instance ErrClosed when the Locker was closed).
func ctxError(op, key string, kind error, ctx context.Context) error {
	cause := ctx.Err()
	if c := context.Cause(ctx); c != nil && c != cause {
		cause = errors.Join(cause, c)
	}
	return newError(op, key, kind, cause)
}
