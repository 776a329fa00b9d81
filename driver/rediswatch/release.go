package rediswatch

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// fromQueue is driver.Lease.Data of a grant that came through the queue:
// next is the queue element that was behind the new holder when it was
// granted, the likely first in line at its release (see release).
type fromQueue struct{ next string }

// Release deletes l's grant and, when a live waiter is queued, hands the
// key to the first one in the same transaction (see release). It finds the
// grant by l.Owner alone, so it also cleans up after an Acquire whose
// outcome is unknown (l.Token unset). If that Acquire never sent its
// transaction, there is nothing to do and no round trip. If it did, the
// EXEC may still be on its way to the server (a lost reply, a slow
// network), so the clean-up also sets the attempt's tombstone, with the
// lease's TTL: the grant watches it, so an EXEC that arrives after the
// tombstone is aborted, and one that arrived before is found by GET.
func (d *watchDriver) Release(ctx context.Context, l *driver.Lease) error {
	lk := d.LockKey(l.Key)
	var tomb string
	if l.Token == 0 {
		if !wasSent(l) {
			return driver.ErrNotHeld
		}
		tomb = tombstone(lk, l.Owner)
	}
	if l.Mode != driver.Exclusive { // a share or a permit
		return d.releaseMember(ctx, memberKindOf(l), lk, l.Owner, tomb, max(px(l.TTL), 1))
	}
	q, viaQueue := l.Data.(fromQueue)
	return d.release(ctx, lk, l.Owner, tomb, max(px(l.TTL), 1), q.next, viaQueue, l.Reentrant)
}

// release deletes the grant of owner on lk and hands the key over to the
// first waiter in line, if its entry is alive, in two round trips:
//
//	WATCH lock [counter entry]; GET lock; LRANGE queue 0 0 [; GET counter; TIME; GET entry]
//	MULTI; DEL lock; SET lock FIRST PX ttl; SET counter token PX 7d;
//	       LREM queue FIRST; DEL entry; SET grant token PX life;
//	       PUBLISH inbox "FIRST"; EXEC
//
// The first round trip watches and reads the entry of guess, the waiter
// that was behind owner when owner's own attempt granted it through the
// queue (fromQueue, read from the server by that attempt): on a busy key it
// is first in line now. When it is not, a round trip more watches and
// reads the first waiter's entry, the counter and the clock. The entry
// (see queue.go) gives the new holder's TTL. The message only wakes FIRST
// (it grants nothing: anyone allowed to publish on the channel could send
// it): FIRST's next attempt finds the key its own, extends it to its TTL
// and takes the token from the grant record P{K}:wg:FIRST (see acquire),
// which also serves a waiter whose message is lost; the release of a
// grant that came through the queue deletes it. The token follows
// acquire's rule; the counter is watched, so no grant can come in between.
//
// For a hold of a named owner (hold set; see holds.go) it also watches the
// holds and checks that owner is one of them and the key holds the same
// owner; while other holds are left, the transaction only removes owner's
// (HDEL); the last hold deletes them with the grant.
//
// With no one queued it deletes the key and publishes "" on the key's
// channel, which wakes every waiter of other kinds (redisnx's, retry
// strategies). A first waiter whose entry is gone is dead: its element is
// removed, and "" on the channel wakes the others, whose next attempt takes
// the free key. An entry of an older version of this driver ("") cannot be
// handed over: the release names the waiter (on its inbox, or on the key's
// channel), which then takes the free key. A waiter queued without an inbox
// (its Locker's inbox was not confirmed yet when it joined) gets the
// message on the key's channel.
func (d *watchDriver) release(ctx context.Context, lk, owner, tomb string, tombLife time.Duration, guess string, viaQueue, hold bool) error {
	ck, wq, hk := counterKey(lk), waitQueue(lk), holdsKey(lk)
	guessOwner, _ := splitElem(guess)
	return d.retryAborted(ctx, "release", lk, &d.stats.releaseAborts, func() error {
		return d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var (
				get, counter, entry *redis.StringCmd
				line                *redis.StringSliceCmd
				now                 *redis.TimeCmd
				held                *redis.BoolCmd
				holds               *redis.IntCmd
			)
			watch := []string{lk}
			if hold {
				watch = append(watch, hk)
			}
			if guess != "" {
				watch = append(watch, ck, waitEntry(lk, guessOwner))
			}
			err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
				if tomb != "" {
					p.Set(ctx, tomb, "", tombLife)
				}
				get = p.Get(ctx, lk)
				if hold {
					held, holds = p.HExists(ctx, hk, owner), p.HLen(ctx, hk)
				}
				line = p.LRange(ctx, wq, 0, 0)
				if guess != "" {
					counter, now = p.Get(ctx, ck), p.Time(ctx)
					entry = p.Get(ctx, waitEntry(lk, guessOwner))
				}
			})
			if err != nil {
				return err
			}
			if hold {
				if get.Err() != nil || !driver.SameOwner(get.Val(), owner) || !held.Val() {
					unwatch(ctx, tx)
					return driver.ErrNotHeld
				}
				if holds.Val() > 2 { // holds are left ("t" is not one)
					d.hook("release", lk)
					return exec(ctx, tx, func(p redis.Pipeliner) { p.HDel(ctx, hk, owner) })
				}
			} else if get.Err() != nil || get.Val() != owner {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			var first string
			if q := line.Val(); len(q) > 0 {
				first = q[0]
			}
			firstOwner, inbox := splitElem(first)
			if first != "" && firstOwner != guessOwner {
				if counter, now, entry, err = watchFirst(ctx, tx, ck, waitEntry(lk, firstOwner)); err != nil {
					return err
				}
			}
			var h *handOver
			if first != "" {
				if h, err = planHandOver(entry, counter, now); err != nil {
					unwatch(ctx, tx)
					return err
				}
			}
			d.hook("release", lk)
			var del *redis.IntCmd
			err = exec(ctx, tx, func(p redis.Pipeliner) {
				del = p.Del(ctx, lk)
				if hold {
					p.Del(ctx, hk)
				}
				if viaQueue {
					p.Del(ctx, grantRecord(lk, owner))
				}
				switch {
				case first == "":
					p.Publish(ctx, channel(lk), "")
				case h == nil && entry.Err() != nil: // dead: no entry
					p.LRem(ctx, wq, 1, first)
					p.Publish(ctx, channel(lk), "")
				case h == nil: // an entry this version cannot hand over to
					publishTo(ctx, p, lk, inbox, firstOwner)
				default:
					tok := strconv.FormatInt(h.token, 10)
					p.Do(ctx, "set", lk, firstOwner, "px", h.ttl)
					p.Do(ctx, "set", ck, tok, "px", fenceLife.Milliseconds())
					p.LRem(ctx, wq, 1, first)
					p.Del(ctx, waitEntry(lk, firstOwner))
					p.Do(ctx, "set", grantRecord(lk, firstOwner), tok, "px", redisx.EntryLifeMS)
					publishTo(ctx, p, lk, inbox, firstOwner)
				}
			})
			if err != nil {
				return err
			}
			if h != nil {
				d.stats.handOvers.Add(1)
			}
			if del.Val() != 1 {
				// The key expired after GET, on a server that does not abort
				// the EXEC for it: it was not owner's any more (the hand-over
				// is still right: the key was free).
				return driver.ErrNotHeld
			}
			return nil
		})
	})
}

// publishTo publishes msg, which names a waiter, on its inbox, or on lk's
// channel when it has none.
func publishTo(ctx context.Context, p redis.Pipeliner, lk, inbox, msg string) {
	if inbox == "" {
		inbox = channel(lk)
	}
	p.Publish(ctx, inbox, msg)
}

// watchFirst watches the counter and the entry of the waiter first in line
// and reads them with the server's clock, in one round trip.
func watchFirst(ctx context.Context, tx *redis.Tx, ck, entry string) (counter *redis.StringCmd, now *redis.TimeCmd, e *redis.StringCmd, err error) {
	err = watchAndRead(ctx, tx, []string{ck, entry}, func(p redis.Pipeliner) {
		counter, now, e = p.Get(ctx, ck), p.Time(ctx), p.Get(ctx, entry)
	})
	return counter, now, e, err
}

// handOver is what a release needs to hand the key over.
type handOver struct {
	ttl   int64 // the new holder's TTL in ms
	token int64
}

// planHandOver reads the first waiter's entry ("TTL 0"; see queue.go) and
// the fencing counter. It returns nil when the entry is missing (the
// waiter is dead), or is a share's or a permit waiter's, or has no TTL
// (written by an older version of this driver).
func planHandOver(entry, counter *redis.StringCmd, now *redis.TimeCmd) (*handOver, error) {
	if entry.Err() != nil {
		return nil, nil
	}
	ttl, _, ok := strings.Cut(entry.Val(), " ")
	ms, err := strconv.ParseInt(ttl, 10, 64)
	if !ok || err != nil || ms <= 0 {
		return nil, nil
	}
	token, err := nextToken(counter, now)
	if err != nil {
		return nil, err
	}
	return &handOver{ttl: ms, token: token}, nil
}

// nextToken is the fencing token of a grant, from the counter and the
// server's clock read under WATCH (see Acquire): the clock in microseconds,
// or the counter plus one when that is more.
func nextToken(counter *redis.StringCmd, now *redis.TimeCmd) (int64, error) {
	var last int64 // a missing counter counts as 0
	if counter.Err() == nil {
		var err error
		if last, err = strconv.ParseInt(counter.Val(), 10, 64); err != nil {
			return 0, fmt.Errorf("rediswatch: fencing counter holds %q, not an integer", counter.Val())
		}
	}
	return max(last+1, now.Val().UnixMicro()), nil
}
