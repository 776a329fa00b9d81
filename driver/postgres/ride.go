package postgres

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/jackc/pgx/v5/pgconn"
)

// rideOut is how long a queued wait rides out connection failures (a
// PgBouncer or PostgreSQL restart, a network cut) in its place: its steps
// answer with a *driver.HeldError, so lock steps again, until the
// failures have lasted this long; then the failure, marked
// driver.ErrUnavailable, ends the wait, and lock tries again as after any
// attempt that found the server unreachable. The waiter's entry
// lives entryLife after its last step: after a longer failure it joins
// the queue again, at its end. A single attempt (TryLock) is not ridden
// out.
const rideOut = 15 * time.Second

// rideRetry is when a riding waiter steps again.
const rideRetry = 100 * time.Millisecond

// rides are the queued waits whose steps fail, by owner: when their
// failures began.
type rides struct {
	mu      sync.Mutex
	failing map[string]time.Time
}

// ride is a queued step's answer: err itself, unless it is a connection
// failure within rideOut of the first one of this wait, which is a
// *driver.HeldError.
func (d *pgDriver) ride(ctx context.Context, owner string, err error) error {
	r := &d.rides
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil || !connFailure(err) || ctx.Err() != nil {
		delete(r.failing, owner)
		return err
	}
	if r.failing == nil {
		r.failing = map[string]time.Time{}
	}
	start, ok := r.failing[owner]
	if !ok {
		start = time.Now()
		r.failing[owner] = start
	}
	if time.Since(start) > rideOut {
		delete(r.failing, owner)
		return driver.Unavailable(err)
	}
	return &driver.HeldError{RetryAfter: rideRetry}
}

// endRide forgets owner's failures (its wait is over).
func (d *pgDriver) endRide(owner string) {
	d.rides.mu.Lock()
	delete(d.rides.failing, owner)
	d.rides.mu.Unlock()
}

// unreachable marks err as driver.ErrUnavailable when it is a
// connection failure.
func unreachable(err error) error {
	if err != nil && connFailure(err) {
		return driver.Unavailable(err)
	}
	return err
}

// connFailure reports whether err says the server could not be reached
// or dropped the connection, rather than refused the request: no reply
// (a network error, the connection closed), or the server's or the
// pooler's own word for it (class 08, a shutdown, too many connections).
// A certificate that fails verification is a refusal, not a failure.
func connFailure(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrInvalid) ||
		errors.Is(err, driver.ErrHeld) { // the server's answer: the key is held
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03", "57P05", "53300": // admin_shutdown, crash_shutdown, cannot_connect_now, idle_session_timeout, too_many_connections
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	var (
		ni *notInstalled
		cv *tls.CertificateVerificationError // a wrong CA or server name
	)
	return !errors.Is(err, errAbandoned) && !errors.Is(err, errShape) && !errors.As(err, &ni) && !errors.As(err, &cv)
}
