package redisnx

import (
	"context"
	"fmt"
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
// release deletes it. (A grant keeps nothing else: its names would cost
// more memory per lease than making them again for the release.)
type viaQueue struct{}

// modeArg is the scripts' argument for l's mode: "s" for shared, "x" for
// exclusive, "o" for a hold of a named owner (boxed once: a script call's
// arguments are interfaces).
func modeArg(l *driver.Lease) any {
	switch {
	case l.Mode == driver.Shared:
		return argShared
	case l.Reentrant:
		return argHold
	}
	return argExclusive
}

var argShared, argExclusive, argHold any = "s", "x", "o"

// Reentrancy implements driver.Reenterer: a named owner's grant keeps its
// holds in P{K}:h (see prelude.lua).
func (d *redisDriver) Reentrancy() error { return nil }

// SupportsShared implements driver.Sharer: shared grants are members of
// the readers set P{K}:r, with the lock key holding "R" (see prelude.lua).
func (d *redisDriver) SupportsShared() bool { return true }

// Acquire runs acquire.lua: SET PX if the key is free and no one is queued,
// and the fencing counter, one round trip.
func (d *redisDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	return d.acquire(ctx, l, names(d.Prefix, l.Key, l.Owner))
}

// acquire is Acquire with the key's names already made.
func (d *redisDriver) acquire(ctx context.Context, l *driver.Lease, keys *keyNames) error {
	l.Data = nil
	if err := ctx.Err(); err != nil {
		l.Data = noGrant{}
		return err
	}
	px, validity := ms(l.TTL)
	n, err := acquireScript.Run(ctx, d.Client, keys[:6], l.Owner, px, modeArg(l)).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redisnx: grant: %w", redisx.WithCtx(ctx, err))
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
	n := names(d.Prefix, l.Key, l.Owner)
	keys := []string{n[0], n[1], n[3], n[4], n[5]}
	args := []any{l.Owner, n[6], 0, modeArg(l)}
	if queued || l.Token == 0 {
		args[2] = 1
	}
	if l.Token == 0 {
		px, _ := ms(l.TTL)
		keys = append(keys, n[2])
		args = append(args, max(px, 1))
	}
	r, err := releaseScript.Run(ctx, d.Client, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("redisnx: release: %w", redisx.WithCtx(ctx, err))
	}
	if r != 1 {
		return driver.ErrNotHeld
	}
	return nil
}
