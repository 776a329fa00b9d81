package redisnx

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// notSent marks, in driver.Lease.Data, an Acquire that failed before it sent
// anything, so that the clean-up Release that follows needs no round trip.
type notSent struct{}

// Acquire runs acquire.lua: SET NX PX and the fencing counter, one round trip.
func (d *redisDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	l.Data = nil
	if err := ctx.Err(); err != nil {
		l.Data = notSent{}
		return err
	}
	lk := lockKey(d.prefix, l.Key)
	px, validity := ms(l.TTL)
	n, err := acquireScript.Run(ctx, d.client,
		[]string{lk, lk + counterSuffix, lk + voidInfix + l.Owner}, l.Owner, px).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("redisnx: grant: %w", err)
	case n > 0:
		l.Token = uint64(n)
		l.Validity = validity
		return nil
	case n < -1:
		// Free one millisecond after the holder's PTTL at most.
		return &driver.HeldError{RetryAfter: time.Duration(-n-2+1) * time.Millisecond}
	default: // held without expiry, or an abandoned attempt
		return &driver.HeldError{}
	}
}

// Release runs release.lua: compare-and-delete plus PUBLISH, one round trip.
// After a grant with an unknown outcome (no token), it also leaves a
// tombstone that refuses copies of that grant request still on their way.
func (d *redisDriver) Release(ctx context.Context, l *driver.Lease) error {
	if _, ok := l.Data.(notSent); ok {
		return driver.ErrNotHeld
	}
	lk := lockKey(d.prefix, l.Key)
	keys := []string{lk}
	args := []any{l.Owner, lk + channelSuffix}
	if l.Token == 0 {
		px, _ := ms(l.TTL)
		keys = append(keys, lk+voidInfix+l.Owner)
		args = append(args, max(px, 1))
	}
	n, err := releaseScript.Run(ctx, d.client, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("redisnx: release: %w", err)
	}
	if n != 1 {
		return driver.ErrNotHeld
	}
	return nil
}
