package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Holds of a named owner (lock.WithOwner, driver.Lease.Reentry) use
// redisnx's layout, so that both drivers' holds of one owner share a
// grant: the lock key holds the owner token of the grant's first hold (all
// tokens of one named owner start with the same 16 hex digits), and
// P{K}:h is a hash of the holds' owner tokens ("1") and "t", the grant's
// fencing token, expiring with the lock key.

func holdsKey(lk string) string { return lk + redisx.HoldsSuffix }

// acquireHold makes one attempt at a hold of l's named owner, in two
// round trips:
//
//	WATCH lock holds counter tombstone; GET lock; HGET holds t; PTTL lock;
//	      GET counter; TIME; LRANGE queue 0 1
//	MULTI; HSET holds OWNER 1; [PEXPIRE lock ttl]; PEXPIRE holds pttl; EXEC
//	                                        (a re-entry: lock holds a hold
//	                                         of the same owner)
//	MULTI; SET lock OWNER PX ttl; SET counter token PX 7d; DEL holds;
//	       HSET holds t token OWNER 1; PEXPIRE holds ttl; EXEC
//	                                        (a free key)
//
// A re-entry extends the grant to at least ttl, never shortening it: the
// other holds count on their own deadlines. A free key with a live waiter
// first in line is refused, as Acquire refuses it. Unlike Acquire's, the
// grant watches the lock key: a transaction aborted by its expiry or
// release is retried by lock like a held key.
func (d *watchDriver) acquireHold(ctx context.Context, l *driver.Lease) error {
	markSent(l, false)
	lk := d.LockKey(l.Key)
	ck, hk, wq := counterKey(lk), holdsKey(lk), waitQueue(lk)
	ttl := px(l.TTL)
	var token int64
	err := d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		var (
			get, tok, counter *redis.StringCmd
			pttl              *redis.DurationCmd
			now               *redis.TimeCmd
			line              *redis.StringSliceCmd
			notes             *redis.DurationCmd
		)
		watch := []string{lk, hk, ck, tombstone(lk, l.Owner)}
		if l.Note != "" {
			watch = append(watch, notesKey(lk))
		}
		err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
			if l.Note != "" {
				notes = p.PTTL(ctx, notesKey(lk))
			}
			get, tok, pttl = p.Get(ctx, lk), p.HGet(ctx, hk, "t"), p.PTTL(ctx, lk)
			counter, now = p.Get(ctx, ck), p.Time(ctx)
			line = p.LRange(ctx, wq, 0, 1)
		})
		if err != nil {
			return err
		}
		if get.Err() == nil {
			if !driver.SameOwner(get.Val(), l.Owner) || tok.Err() != nil {
				unwatch(ctx, tx)
				return heldFor(pttl.Val())
			}
			if token, err = strconv.ParseInt(tok.Val(), 10, 64); err != nil || token <= 0 {
				unwatch(ctx, tx)
				return fmt.Errorf("rediswatch: holds %s: token %s is not a positive integer", errtext.Quote(hk), errtext.Quote(tok.Val()))
			}
			markSent(l, true)
			d.hook("grant", lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				p.HSet(ctx, hk, l.Owner, "1")
				keepHolds(ctx, p, lk, hk, pttl.Val(), ttl)
			})
		}
		var head string
		if q := line.Val(); len(q) > 0 {
			head = q[0]
		}
		dead, err := firstInLine(ctx, tx, lk, l.Owner, head)
		if err != nil {
			return err
		}
		if token, err = nextToken(valueOf(counter), now.Val()); err != nil {
			unwatch(ctx, tx)
			return fmt.Errorf("%w (%s)", err, errtext.Quote(ck))
		}
		markSent(l, true)
		d.hook("grant", lk)
		return exec(ctx, tx, func(p redis.Pipeliner) {
			tok := strconv.FormatInt(token, 10)
			p.Do(ctx, "set", lk, l.Owner, "px", ttl.Milliseconds())
			p.Do(ctx, "set", ck, tok, "px", fenceLife.Milliseconds())
			p.Del(ctx, hk)
			p.HSet(ctx, hk, "t", tok, l.Owner, "1")
			p.Do(ctx, "pexpire", hk, ttl.Milliseconds())
			if dead != "" {
				p.LRem(ctx, wq, 1, dead)
			}
			if l.Note != "" { // a re-entry keeps the first hold's
				noteCmds(ctx, p, lk, l.Owner, l.Note, notes.Val(), ttl.Milliseconds())
			}
		})
	})
	switch {
	case errors.Is(err, errAborted):
		d.stats.grantAborts.Add(1)
		return &driver.HeldError{}
	case err != nil:
		return redisx.WithCtx(ctx, err)
	}
	l.Token, l.Validity = uint64(token), ttl
	return nil
}

// keepHolds queues the writes that extend the lock lk, whose PTTL was
// pttl when read under WATCH, to at least ttl, and make its holds hk
// expire with it.
func keepHolds(ctx context.Context, p redis.Pipeliner, lk, hk string, pttl, ttl time.Duration) {
	if pttl < ttl {
		p.Do(ctx, "pexpire", lk, ttl.Milliseconds())
	}
	p.Do(ctx, "pexpire", hk, max(pttl, ttl).Milliseconds())
}

// extendHold extends the grant of owner's hold on lk to at least ttl, if
// owner is one of its holds and, when token is not 0, the grant's token is
// token; in two round trips:
//
//	WATCH lock holds; GET lock; HEXISTS holds OWNER; HGET holds t; PTTL lock
//	MULTI; [PEXPIRE lock ttl]; PEXPIRE holds pttl; EXEC
func (d *watchDriver) extendHold(ctx context.Context, op, lk, owner string, ttl time.Duration, token uint64, note bool) error {
	hk := holdsKey(lk)
	return d.retryAborted(ctx, op, lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
			var (
				get, tok *redis.StringCmd
				held     *redis.BoolCmd
				pttl     *redis.DurationCmd
				npttl    *redis.DurationCmd
			)
			watch := []string{lk, hk}
			if note {
				watch = append(watch, notesKey(lk))
			}
			err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
				if note {
					npttl = p.PTTL(ctx, notesKey(lk))
				}
				get, held, tok, pttl = p.Get(ctx, lk), p.HExists(ctx, hk, owner), p.HGet(ctx, hk, "t"), p.PTTL(ctx, lk)
			})
			if err != nil {
				return err
			}
			if get.Err() != nil || !driver.SameOwner(get.Val(), owner) || !held.Val() ||
				(token != 0 && tok.Val() != strconv.FormatUint(token, 10)) {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			d.hook(op, lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				keepHolds(ctx, p, lk, hk, pttl.Val(), ttl)
				if note {
					lengthenCmd(ctx, p, notesKey(lk), npttl.Val(), ttl.Milliseconds())
				}
			})
		})
	})
}
