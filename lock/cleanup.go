package lock

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// logCleanup logs err, the failure of a clean-up (a background release or
// leave), that came after an attempt that failed with cause (nil for the
// clean-ups of leases and of waits that ctx ended). It is a warning, for
// the grant or queue entry may be left until its TTL, except when the
// attempt was turned away (see turnedAway): then it is at debug level,
// since a warning that a key is left would most likely be false, and the
// caller has the attempt's error, which says why.
func (lk *Locker) logCleanup(msg, key string, err, cause error) {
	if lk.opts.Logger == nil {
		return
	}
	if cause != nil && turnedAway(cause, err) {
		lk.opts.Logger.Debug("dlock: "+msg+" (after an attempt that did not reach the backend)", "key", key, "err", err, "attempt", cause)
		return
	}
	lk.logWarn(msg, key, err)
}

// turnedAway reports whether an attempt that failed with cause, and whose
// clean-up failed with err, did not reach the backend: it could not
// connect (a dial error: connection refused, no route, an unknown host),
// or the backend turned it and its clean-up away alike, with the same
// error that is not one of a connection failing midway (a wrong password,
// a permission an ACL denies). Only the log level depends on it: the
// clean-up is made all the same, for the rule can be wrong both ways: a
// client that retried a request whose reply was lost and then could not
// reconnect reports the dial error too, and a client library that reports
// a broken connection by an opaque error value, which every clean-up
// attempt meets again, looks like a refusal.
func turnedAway(cause, err error) bool {
	var op *net.OpError
	if errors.As(cause, &op) && op.Op == "dial" {
		return true
	}
	rc, re := rootCause(cause), rootCause(err)
	return rc.Error() == re.Error() && !midway(rc)
}

// rootCause is the innermost error of err's chain of single wraps.
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// midway reports whether err is one that a request may meet after the
// backend got it: a timeout, an end of the context, a broken connection.
func midway(err error) bool {
	var (
		ne    net.Error
		errno syscall.Errno
	)
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ne) || errors.As(err, &errno)
}
