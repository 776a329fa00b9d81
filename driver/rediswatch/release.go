package rediswatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Release deletes l's grant and announces it, in two round trips:
//
//	WATCH lock; LINDEX queue 0; GET lock
//	MULTI; DEL lock; PUBLISH inbox FIRST; EXEC     (if GET == l.Owner)
//
// FIRST is the owner queued first, who alone is woken to take the key (see
// queue.go), named on its Locker's inbox. When no one is queued, it
// publishes "" on the key's channel instead, which wakes every waiter.
//
// It finds the grant by l.Owner alone, so it also cleans up after an
// Acquire whose outcome is unknown (l.Token unset). If that Acquire never
// sent its transaction, there is nothing to do and no round trip. If it
// did, the EXEC may still be on its way to the server (a lost reply, a slow
// network), so the clean-up also sets the attempt's tombstone, with the
// lease's TTL: the grant watches it, so an EXEC that arrives after the
// tombstone is aborted, and one that arrived before is found by GET.
func (d *watchDriver) Release(ctx context.Context, l *driver.Lease) error {
	var tomb string
	if l.Token == 0 {
		if !wasSent(l) {
			return driver.ErrNotHeld
		}
		tomb = tombstone(d.LockKey(l.Key), l.Owner)
	}
	lk := d.LockKey(l.Key)
	ch := channel(lk)
	var head *redis.StringCmd
	before := func(p redis.Pipeliner) {
		if tomb != "" {
			p.Set(ctx, tomb, "", max(px(l.TTL), 1))
		}
		head = p.LIndex(ctx, waitQueue(lk), 0)
	}
	return d.ownerTx(ctx, "release", lk, l.Owner, before, func(p redis.Pipeliner) *redis.IntCmd {
		del := p.Del(ctx, lk)
		// The first waiter queued is the one to take the key: name it, on
		// its Locker's inbox if it has one. With none queued, "" on the
		// key's channel wakes every waiter.
		owner, inbox := splitElem(head.Val())
		if inbox != "" {
			p.Publish(ctx, inbox, owner)
		} else {
			p.Publish(ctx, ch, owner)
		}
		return del
	})
}

// ownerTx runs an owner-checked write: WATCH lock and GET it, with the
// commands queued by before (if any) in the same round trip; if lock holds
// owner, run the writes queued by queue in MULTI/EXEC. The integer reply of
// the command queue returns must be 1 (DEL and PEXPIRE return 0 for a key
// that expired after GET, on servers that do not abort the EXEC for it).
// An aborted EXEC is retried, up to d.maxAttempts transactions per call.
func (d *watchDriver) ownerTx(ctx context.Context, op, lk, owner string, before func(p redis.Pipeliner), queue func(p redis.Pipeliner) *redis.IntCmd) error {
	aborts := &d.stats.releaseAborts
	if op == "refresh" {
		aborts = &d.stats.refreshAborts
	}
	for attempt := 1; ; attempt++ {
		err := d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var get *redis.StringCmd
			err := watchAndRead(ctx, tx, []string{lk}, func(p redis.Pipeliner) {
				if before != nil {
					before(p)
				}
				get = p.Get(ctx, lk)
			})
			if err != nil {
				return err
			}
			if get.Err() != nil || get.Val() != owner {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			d.hook(op, lk)
			var applied *redis.IntCmd
			if err := exec(ctx, tx, func(p redis.Pipeliner) { applied = queue(p) }); err != nil {
				return err
			}
			if applied.Val() != 1 {
				return driver.ErrNotHeld
			}
			return nil
		})
		if !errors.Is(err, errAborted) {
			return redisx.WithCtx(ctx, err)
		}
		aborts.Add(1)
		if attempt >= d.maxAttempts {
			d.stats.gaveUp.Add(1)
			return fmt.Errorf("%w: %s of %q gave up after %d aborted transactions", ErrConflict, op, lk, attempt)
		}
		if ctx.Err() != nil {
			return redisx.WithCtx(ctx, ctx.Err())
		}
	}
}
