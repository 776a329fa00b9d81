package redisnx

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
)

// noGrant marks, in driver.Lease.Data, an attempt known to have granted
// nothing (it failed before it sent anything, say), so that the clean-up
// that follows needs no round trip.
type noGrant struct{}

// viaQueue marks, in driver.Lease.Data, a grant made by wait.lua or handed
// over through the queue: its queue entry holds the token until the
// release deletes it; and a resumed grant (note: it has a note, which the
// resumed Lease's own Note does not say). (A grant keeps nothing else:
// its names would cost more memory per lease than making them again for
// the release.)
type viaQueue struct{ note bool }

// noted reports whether l's grant has a note in P{K}:n (prelude.lua),
// which its refreshes lengthen and its release deletes.
func noted(l *driver.Lease) bool {
	return l.Note != "" || l.Data == any(viaQueue{note: true})
}

// ownerArg is the scripts' owner argument of release.lua and refresh.lua
// for l: its owner token (with prefix, for refresh's modes), and "n" after
// it when noted(l).
func ownerArg(prefix string, l *driver.Lease) string {
	if noted(l) {
		return prefix + l.Owner + "n"
	}
	return prefix + l.Owner
}

// modeArg is the scripts' argument for l's mode: "s" for shared, "x" for
// exclusive, "o" for a hold of a named owner (boxed once: a script call's
// arguments are interfaces), "pN" for a permit of a semaphore of N
// permits.
func modeArg(l *driver.Lease) any {
	switch {
	case l.Mode == driver.Shared:
		return argShared
	case l.Mode == driver.Permit:
		return "p" + strconv.Itoa(l.Limit)
	case l.Reentry:
		return argHold
	}
	return argExclusive
}

var argShared, argExclusive, argHold any = "s", "x", "o"

// limitError is the refusal of a permit l whose key's permits, held or
// queued, are of a semaphore of another limit, told by a script as the
// lock key's value, "SM".
func limitError(l *driver.Lease, value string) error {
	m, err := strconv.Atoi(strings.TrimPrefix(value, "S"))
	if err != nil || !strings.HasPrefix(value, "S") {
		return fmt.Errorf("redisnx: unexpected reply %q", value)
	}
	return limitMismatch(l, int64(m))
}

// limitMismatch is the refusal of a permit l on a key whose permits are of
// a semaphore of m permits.
func limitMismatch(l *driver.Lease, m int64) error {
	return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrInvalid, m, l.Limit)
}

// Acquire runs acquire.lua: SET PX if the key is free and no one is queued,
// and the fencing counter, one round trip.
func (d *redisDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	return d.acquire(ctx, l, lockKey(d.Prefix, l.Key))
}

// acquire is Acquire with the lock key's name already made (lk): the
// script makes the other names from it.
func (d *redisDriver) acquire(ctx context.Context, l *driver.Lease, lk string) error {
	l.Data = nil
	if err := ctx.Err(); err != nil {
		l.Data = noGrant{}
		return err
	}
	px, validity := ms(l.TTL)
	c := newCall(lk, l.Owner, d.Lanes.ReturnsAtContextEnd()).addPX(px).add(modeArg(l))
	if l.Note != "" {
		c.add(l.Note)
	}
	res, err := c.run(ctx, d.Lanes, acquireBoxed).Result()
	if err != nil {
		if redisx.NotSent(err) {
			l.Data = noGrant{}
		}
		return fmt.Errorf("redisnx: grant: %w", redisx.WithCtx(ctx, err))
	}
	n, ok := res.(int64)
	if !ok {
		// A permit refused for its limit: the script changed nothing.
		l.Data = noGrant{}
		if v, ok := res.(string); ok {
			return limitError(l, v)
		}
		return fmt.Errorf("redisnx: grant: unexpected reply %v", res)
	}
	switch {
	case n > 0:
		l.Token, l.Validity = uint64(n), validity
		return nil
	case n < -1:
		// Free one millisecond after the holder's PTTL at most.
		return &driver.HeldError{RetryAfter: time.Duration(-n-2+1) * time.Millisecond}
	default: // held without expiry, or an abandoned attempt
		return &driver.HeldError{}
	}
}

// Release runs release.lua: compare-and-delete, then the hand-over to the
// first waiter queued or a PUBLISH, one round trip. After a grant with an
// unknown outcome (no token), it also leaves a tombstone that refuses
// copies of that grant request still on their way.
func (d *redisDriver) Release(ctx context.Context, l *driver.Lease) error {
	if _, ok := l.Data.(noGrant); ok {
		return driver.ErrNotHeld
	}
	_, queued := l.Data.(viaQueue)
	owner := l.Owner
	if noted(l) {
		owner = ownerArg("", l)
	}
	c := newCall(lockKey(d.Prefix, l.Key), owner, d.Lanes.ReturnsAtContextEnd())
	switch {
	case l.Token == 0: // a clean-up: it leaves a tombstone
		px, _ := ms(l.TTL)
		c.add(1).add(modeArg(l)).addPX(max(px, 1))
	case queued:
		c.add(1).add(modeArg(l))
	default:
		c.add(0).add(modeArg(l))
	}
	r, err := c.run(ctx, d.Lanes, releaseBoxed).Int64()
	if err != nil {
		return fmt.Errorf("redisnx: release: %w", redisx.WithCtx(ctx, err))
	}
	if r != 1 {
		return driver.ErrNotHeld
	}
	return nil
}
