package lock

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// ErrDetached is reported by Lease.Err after Detach: the grant was left
// on the backend, to be resumed elsewhere (see Locker.Resume).
var ErrDetached = errors.New("lock: lease detached")

// handlePrefix starts every handle: the format's name and version.
const handlePrefix = "dlock1."

// Handle returns a printable description of the lease's grant, for
// Locker.Resume in another Locker or process: its mode, owner token,
// fencing token and key, as "dlock1.MODE.OWNER.TOKEN.KEY" (MODE "x" for
// exclusive, "s" for shared, "o" for one hold of a named owner, "pN" for a
// permit of a semaphore of N permits; OWNER 32 hex digits, TOKEN decimal,
// KEY in unpadded URL-safe base64). It is safe in a file, a command line or an environment
// variable. A nil or zero Lease has none: "".
//
// A handle is a capability: whoever has it can extend and release the
// grant (and, on most backends, so can whoever reads the backend's keys).
// Keep it as secret as the lease deserves.
func (l *Lease) Handle() string {
	if l.invalid() {
		return ""
	}
	mode := "x"
	switch {
	case l.dl.Mode == driver.Shared:
		mode = "s"
	case l.dl.Mode == driver.Permit:
		mode = "p" + strconv.Itoa(l.dl.Limit)
	case l.dl.Reentry:
		mode = "o"
	}
	return handlePrefix + mode + "." + l.dl.Owner + "." + strconv.FormatUint(l.dl.Token, 10) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(l.dl.Key))
}

// handle is a parsed Handle.
type handle struct {
	key, owner string
	token      uint64
	mode       driver.Mode
	limit      int  // a permit's semaphore limit ("pN")
	reentrant  bool // a hold of a named owner ("o")
}

// parseHandle parses what Lease.Handle returns, and nothing else.
func parseHandle(s string) (handle, error) {
	var h handle
	rest, ok := strings.CutPrefix(s, handlePrefix)
	if !ok {
		return h, fmt.Errorf("lease handle %.40q does not start with %q", s, handlePrefix)
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 {
		return h, fmt.Errorf("lease handle %.40q: want dlock1.MODE.OWNER.TOKEN.KEY", s)
	}
	switch parts[0] {
	case "x":
		h.mode = driver.Exclusive
	case "s":
		h.mode = driver.Shared
	case "o":
		h.reentrant = true
	default:
		n, ok := strings.CutPrefix(parts[0], "p")
		limit, err := strconv.Atoi(n)
		if !ok || err != nil || strconv.Itoa(limit) != n || checkLimit(limit) != nil {
			return h, fmt.Errorf("lease handle: mode %.8q, want x, s, o or pN (N from 1 to %d)", parts[0], MaxPermits)
		}
		h.mode, h.limit = driver.Permit, limit
	}
	h.owner = parts[1]
	if !driver.IsOwner(h.owner) {
		return h, fmt.Errorf("lease handle: owner %.40q is not 32 lowercase hex digits", h.owner)
	}
	var err error
	if h.token, err = strconv.ParseUint(parts[2], 10, 64); err != nil || h.token == 0 {
		return h, fmt.Errorf("lease handle: token %.24q is not a positive integer", parts[2])
	}
	key, err := base64.RawURLEncoding.Strict().DecodeString(parts[3])
	if err != nil {
		return h, fmt.Errorf("lease handle: key is not unpadded URL-safe base64: %v", err)
	}
	h.key = string(key)
	if err := checkKey(h.key); err != nil {
		return h, fmt.Errorf("lease handle: %w", err)
	}
	return h, nil
}

// Resume takes over the grant that handle describes (Lease.Handle,
// Lease.Detach), made through another Locker of the same backend, in this
// process or another: the backend checks that the grant still exists with
// that owner (and, where it records it, that token) and extends it to at
// least the TTL, never shortening it (the first holder's deadline counts
// on it); the new Lease has the same key and token, and its own deadline,
// renewal (the options as for Lock; WithRetry is not used: Resume makes
// one attempt) and Done. Until one of them ends it, the grant is held by
// both Leases: the first holder should have died, or Detach it. Errors
// wrap ErrInvalid (a malformed handle), ErrUnsupported (a backend whose
// driver cannot resume: ZooKeeper's), ErrNotAcquired and ErrNotHeld (the
// grant is gone), ErrNotAcquired and the backend's or the context's
// error, or ErrClosed. A failed Resume changes nothing.
func (lk *Locker) Resume(ctx context.Context, handle string, opts ...Option) (*Lease, error) {
	const op = "resume"
	switch {
	case lk == nil:
		return nil, newError(op, "", ErrInvalid, errNilLocker)
	case ctx == nil:
		return nil, newError(op, "", ErrInvalid, errNilContext)
	}
	hd, herr := parseHandle(handle)
	if err := lk.checkCall(op, "", herr); err != nil {
		return nil, err
	}
	r, err := lk.resumerFor(op, hd)
	if err != nil {
		return nil, err
	}
	key := hd.key
	co, err := lk.options(op, key, opts)
	if err != nil {
		return nil, err
	}
	if co.named {
		return nil, newError(op, key, ErrInvalid, errors.New("WithOwner does not apply to Resume: the handle names the owner"))
	}
	if co.note != "" {
		return nil, newError(op, key, ErrInvalid, errors.New("WithNote does not apply to Resume: the grant keeps its note"))
	}
	l, err := lk.newLease(op, co, driver.Lease{Key: key, Owner: hd.owner, Mode: hd.mode, Limit: hd.limit, TTL: co.ttl, Token: hd.token, Reentry: hd.reentrant})
	if err != nil {
		return nil, err
	}
	l.resumed = true
	sc, err := lk.enter(ctx, op, key)
	if err != nil {
		return nil, err
	}
	defer sc.exit()
	return lk.resume(sc.ctx, r, l)
}

// resumerFor returns the driver as a Resumer of the grant hd describes,
// or an error wrapping ErrUnsupported that says why it cannot resume it.
func (lk *Locker) resumerFor(op string, hd handle) (driver.Resumer, error) {
	key := hd.key
	if err := lk.refuse(op, key, Resume); err != nil {
		return nil, err
	}
	if err := lk.refuseMode(op, key, hd.mode); err != nil {
		return nil, err
	}
	if hd.reentrant {
		if err := lk.refuse(op, key, Reentry); err != nil {
			return nil, err
		}
	}
	return lk.d.(driver.Resumer), nil
}

// resume takes over l's grant through r, in the call whose context is ctx.
func (lk *Locker) resume(ctx context.Context, r driver.Resumer, l *Lease) (*Lease, error) {
	const op = "resume"
	dl := l.dl
	key := dl.Key
	start := time.Now()
	// No clean-up after a failure: the grant is someone else's until this
	// call succeeds, and a Resume only ever extends it.
	ok, err := lk.within(ctx, func() error { return r.Resume(ctx, dl) }, nil)
	switch {
	case !ok:
		return nil, ctxError(op, key, ErrNotAcquired, ctx)
	case errors.Is(err, driver.ErrNotHeld):
		return nil, newError(op, key, ErrNotAcquired, newError(op, key, ErrNotHeld, err))
	case err != nil:
		if errors.Is(err, driver.ErrInvalid) {
			return nil, newError(op, key, ErrInvalid, err)
		}
		if ctx.Err() != nil {
			return nil, ctxError(op, key, ErrNotAcquired, ctx)
		}
		return nil, newError(op, key, ErrNotAcquired, err)
	}
	// A Resume whose reply came late (a server paused while it was under
	// way) may leave no validity from its start: refresh it before the
	// lease is handed out, as a late grant is, and never return a lease
	// past its deadline.
	if start, err = lk.revive(ctx, dl, start, true); err != nil {
		switch {
		case errors.Is(err, driver.ErrNotHeld):
			return nil, newError(op, key, ErrNotAcquired, newError(op, key, ErrNotHeld, err))
		case ctx.Err() != nil:
			return nil, ctxError(op, key, ErrNotAcquired, ctx)
		}
		return nil, newError(op, key, ErrNotAcquired, err)
	}
	if lk.afterResume != nil {
		lk.afterResume()
	}
	if err := lk.register(op, l, start); err != nil {
		return nil, err
	}
	return l, nil
}

// Detach ends the lease here without releasing its grant, and returns its
// Handle, so that another Locker (another process) can Resume it: renewal
// stops, Close will not release it, Done closes and Err reports
// ErrDetached. The grant lasts until its TTL passes unless it is resumed
// before. It fails, with the error that ended it, when the lease has
// ended; with ErrUnsupported, leaving the lease as it was, when the
// backend's driver cannot resume leases; with ErrInvalid when the Lease is
// nil or zero.
func (l *Lease) Detach() (string, error) {
	if l.invalid() {
		return "", newError("detach", "", ErrInvalid, errNoLease)
	}
	if err := l.lk.refuse("detach", l.dl.Key, Resume); err != nil {
		return "", err
	}
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return "", l.endedError("detach", err)
	}
	l.mu.Unlock()
	if !l.finish(newError("detach", l.dl.Key, ErrDetached, nil)) {
		return "", l.endedError("detach", l.Err())
	}
	return l.Handle(), nil
}
