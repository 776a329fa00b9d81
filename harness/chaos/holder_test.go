package chaos

import (
	"errors"
	"strings"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// A holder is one client taking part in a scenario: a worker in this
// process (its own Locker and client), or one in a child process.
type holder interface {
	Name() string
	// Lock asks for the scenario's key as in LockArgs.
	Lock(a LockArgs) (grant, error)
	// Unlock stops writing and unlocks; again after a failure, it retries.
	Unlock(timeout time.Duration) error
	// WaitDone waits up to d until the latest lease's Done was seen.
	WaitDone(d time.Duration) bool
	// Close lets go of any lease and closes the Locker (waiting for its
	// background releases).
	Close() error
}

type grant struct {
	ID    LeaseID
	Token uint64
	// DOA counts leases Lock returned already past their local deadline
	// (lost at once), before this one; Fails the Lock calls that failed
	// for a backend error and were tried again.
	DOA, Fails int
}

// inproc is a holder in this process.
type inproc struct{ w *worker }

func (h inproc) Name() string { return h.w.name }
func (h inproc) Lock(a LockArgs) (grant, error) {
	id, tok, doa, fails, err := h.w.lock(a)
	return grant{id, tok, doa, fails}, err
}
func (h inproc) Unlock(timeout time.Duration) error { return h.w.unlock(timeout) }
func (h inproc) WaitDone(d time.Duration) bool      { return h.w.waitDone(d) }
func (h inproc) Close() error                       { return h.w.close() }

// remoteError carries an error from a child process, keeping the
// sentinels scenarios check.
type remoteError struct {
	msg                  string
	notAcquired, notHeld bool
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool {
	switch target {
	case lock.ErrNotAcquired:
		return e.notAcquired
	case lock.ErrNotHeld:
		return e.notHeld
	}
	return false
}

func toRemote(err error) *remoteError {
	if err == nil {
		return nil
	}
	return &remoteError{
		msg:         err.Error(),
		notAcquired: errors.Is(err, lock.ErrNotAcquired),
		notHeld:     errors.Is(err, lock.ErrNotHeld),
	}
}

// RemoteErr is a remoteError on the wire.
type RemoteErr struct {
	Msg                  string
	NotAcquired, NotHeld bool
}

func wireErr(err error) *RemoteErr {
	r := toRemote(err)
	if r == nil {
		return nil
	}
	return &RemoteErr{Msg: r.msg, NotAcquired: r.notAcquired, NotHeld: r.notHeld}
}

func (r *RemoteErr) err() error {
	if r == nil {
		return nil
	}
	return &remoteError{msg: r.Msg, notAcquired: r.NotAcquired, notHeld: r.NotHeld}
}

// desc shortens an error for notes.
func desc(err error) string {
	if err == nil {
		return "ok"
	}
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
