package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Shared (read) grants, in redisnx's layout, so that the readers of both
// drivers share a key: while readers hold it, the lock key holds
// redisx.Readers ("R", never an owner) with a PX at least as long as the
// longest share, so every exclusive attempt finds it held; each share is a
// member of P{K}:r, scored by when it expires (server clock, ms). A share
// expires on its own; a share that expired holds nothing, and "R" with no
// live share left is free.
//
// Readers queue like writers (entries "sTTL N"), behind a waiting writer.
// A release never hands the key to a reader: it names the first waiter,
// which takes the key with its own attempt, and a reader's grant names the
// waiter behind it, so that readers in a row follow one another in.

// SupportsShared implements driver.Sharer.
func (d *watchDriver) SupportsShared() bool { return true }

// readerState is what a transaction reads of the readers of lk (or of its
// permits, see semaphore.go): the lock key's value and PTTL, the server's
// clock, and the two members that expire last.
type readerState struct {
	get  *redis.StringCmd
	pttl *redis.DurationCmd
	now  *redis.TimeCmd
	top  *redis.ZSliceCmd
}

func readReaders(ctx context.Context, p redis.Pipeliner, lk string) *readerState {
	return readMembers(ctx, p, lk, readersKey(lk))
}

// readMembers reads lk and the members of its sorted set set (the readers
// or the permits).
func readMembers(ctx context.Context, p redis.Pipeliner, lk, set string) *readerState {
	return &readerState{
		get:  p.Get(ctx, lk),
		pttl: p.PTTL(ctx, lk),
		now:  p.Time(ctx),
		top:  p.ZRangeWithScores(ctx, set, -2, -1),
	}
}

func (s *readerState) nowMS() int64 { return s.now.Val().UnixMilli() }

// liveOther returns the latest expiry among the live shares of owners
// other than owner, and whether there is one.
func (s *readerState) liveOther(owner string) (int64, bool) {
	var last int64
	var ok bool
	for _, z := range s.top.Val() {
		if m, _ := z.Member.(string); m != owner && int64(z.Score) >= s.nowMS() {
			last, ok = max(last, int64(z.Score)), true
		}
	}
	return last, ok
}

// acquireShared is acquire for a shared lease, and for a permit (see
// tryPermit): a share is granted when no writer holds the key and, unless
// the caller is first in line, no live waiter is queued.
//
//	WATCH lock counter tombstone; GET lock; PTTL lock; TIME; ZRANGE readers -2 -1; GET counter; LRANGE queue 0 1; EXISTS tombstone
//	MULTI; [SET lock R PX]; ZREMRANGEBYSCORE readers (expired); ZADD readers expiry owner;
//	       PEXPIRE readers; SET counter token PX 7d; [leave the queue; wake the next waiter]; EXEC
//
// The lock key is watched (a writer must not come in between); a
// transaction aborted by another reader's grant is tried again, up to
// d.maxAttempts times.
func (d *watchDriver) acquireShared(ctx context.Context, l *driver.Lease, how attempt, inbox, entry string) (joined bool, err error) {
	try := d.tryShared
	if l.Mode == driver.Permit {
		try = d.tryPermit
	}
	for attempt := 1; ; attempt++ {
		joined, err = try(ctx, l, how, inbox, entry)
		if !errors.Is(err, errAborted) {
			break
		}
		d.stats.grantAborts.Add(1)
		if attempt >= d.maxAttempts || ctx.Err() != nil {
			break
		}
	}
	if how != tryOnce && (err == nil || errors.Is(err, errAborted)) {
		markSent(l, false)
	}
	switch {
	case errors.Is(err, errAborted):
		return false, &driver.HeldError{}
	case err != nil:
		var held *driver.HeldError
		if errors.As(err, &held) {
			return joined, err
		}
		return joined, redisx.WithCtx(ctx, err)
	}
	return false, nil
}

func (d *watchDriver) tryShared(ctx context.Context, l *driver.Lease, how attempt, inbox, entry string) (joined bool, err error) {
	markSent(l, false)
	lk := d.LockKey(l.Key)
	ck, wq, rk := counterKey(lk), waitQueue(lk), readersKey(lk)
	ttl := px(l.TTL).Milliseconds()
	var (
		token int64
		next  string
	)
	err = d.onConn(ctx, lk, func(tx *redis.Tx) error {
		joined, next = false, ""
		var (
			rs      *readerState
			counter *redis.StringCmd
			line    *redis.StringSliceCmd
			void    *redis.IntCmd
		)
		tomb := tombstone(lk, l.Owner)
		err := watchAndRead(ctx, tx, []string{lk, ck, tomb}, func(p redis.Pipeliner) {
			rs = readReaders(ctx, p, lk)
			counter = p.Get(ctx, ck)
			line = p.LRange(ctx, wq, 0, 1)
			void = p.Exists(ctx, tomb)
		})
		if err != nil {
			return err
		}
		if void.Val() > 0 {
			// The attempt's clean-up ran: a transaction retried after an
			// abort must not grant what it already gave up.
			unwatch(ctx, tx)
			return &driver.HeldError{}
		}
		_, readersLive := rs.liveOther(l.Owner)
		cur := rs.get.Val()
		writer := rs.get.Err() == nil && cur != redisx.Readers
		var head string
		if q := line.Val(); len(q) > 0 {
			head = q[0]
		}
		first, _ := splitElem(head)
		if how == tryThenJoin && (writer || first != "") {
			pttl, err := unwatchAndJoin(ctx, tx, lk, l.Owner, inbox, entry)
			if err != nil {
				return err
			}
			joined = true
			return heldFor(pttl)
		}
		if writer {
			return heldFor(unwatchPTTL(ctx, tx, lk))
		}
		dead, err := firstInLine(ctx, tx, lk, l.Owner, head)
		if err != nil {
			return err
		}
		next = behind(line.Val(), l.Owner, dead)
		if token, err = nextToken(counter, rs.now); err != nil {
			unwatch(ctx, tx)
			return fmt.Errorf("%w (%q)", err, ck)
		}
		now := rs.nowMS()
		keep := ttl // the lock key and the set live at least this long
		if readersLive && cur == redisx.Readers {
			keep = max(keep, rs.pttl.Val().Milliseconds())
		}
		markSent(l, true)
		d.hook("grant", lk)
		return exec(ctx, tx, func(p redis.Pipeliner) {
			if !(readersLive && cur == redisx.Readers && rs.pttl.Val().Milliseconds() >= ttl) {
				p.Do(ctx, "set", lk, redisx.Readers, "px", keep)
			}
			p.ZRemRangeByScore(ctx, rk, "-inf", "("+strconv.FormatInt(now, 10))
			p.ZAdd(ctx, rk, redis.Z{Score: float64(now + ttl), Member: l.Owner})
			p.Do(ctx, "pexpire", rk, keep)
			p.Do(ctx, "set", ck, strconv.FormatInt(token, 10), "px", fenceLife.Milliseconds())
			if dead != "" {
				p.LRem(ctx, wq, 1, dead)
			}
			if how == queued {
				leaveCmds(ctx, p, lk, l.Owner, inbox)
				if next != "" {
					// A reader behind may come in too: wake it.
					o, in := splitElem(next)
					publishTo(ctx, p, lk, in, o)
				}
			}
		})
	})
	if err == nil {
		l.Token, l.Validity = uint64(token), time.Duration(ttl)*time.Millisecond
		if how == queued {
			l.Data = fromQueue{next: next}
		}
	}
	return joined, err
}

// releaseShared ends owner's share of lk, in two round trips:
//
//	WATCH lock readers; [SET tombstone]; GET lock; PTTL lock; TIME; ZRANGE readers -2 -1; ZSCORE readers owner; LRANGE queue 0 0
//	MULTI; ZREM readers owner; ZREMRANGEBYSCORE readers (expired); [PEXPIRE lock]; EXEC      (other readers live)
//	MULTI; ZREM readers owner; DEL lock readers; PUBLISH (the first waiter, or "" on the key's channel); EXEC   (the last)
//
// It returns driver.ErrNotHeld when owner had no live share (an expired one
// is removed all the same).
func (d *watchDriver) releaseShared(ctx context.Context, lk, owner, tomb string, tombLife time.Duration) error {
	rk, wq := readersKey(lk), waitQueue(lk)
	return d.retryAborted(ctx, "release", lk, &d.stats.releaseAborts, func() error {
		var held bool
		err := d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var (
				rs    *readerState
				score *redis.FloatCmd
				line  *redis.StringSliceCmd
			)
			err := watchAndRead(ctx, tx, []string{lk, rk}, func(p redis.Pipeliner) {
				if tomb != "" {
					p.Set(ctx, tomb, "", tombLife)
				}
				rs = readReaders(ctx, p, lk)
				score = p.ZScore(ctx, rk, owner)
				line = p.LRange(ctx, wq, 0, 0)
			})
			if err != nil {
				return err
			}
			if score.Err() != nil {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			now := rs.nowMS()
			held = int64(score.Val()) >= now
			last, others := rs.liveOther(owner)
			d.hook("release", lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				p.ZRem(ctx, rk, owner)
				if rs.get.Val() != redisx.Readers {
					return
				}
				if others {
					p.ZRemRangeByScore(ctx, rk, "-inf", "("+strconv.FormatInt(now, 10))
					if rest := last - now; rest > 0 && rest < rs.pttl.Val().Milliseconds() {
						p.Do(ctx, "pexpire", lk, rest)
					}
					return
				}
				p.Del(ctx, lk, rk)
				if q := line.Val(); len(q) > 0 {
					o, in := splitElem(q[0])
					publishTo(ctx, p, lk, in, o)
				} else {
					p.Publish(ctx, channel(lk), "")
				}
			})
		})
		if err == nil && !held {
			err = driver.ErrNotHeld
		}
		return err
	})
}

// extendShared extends owner's live share of lk to ttl from now, and the
// lock key and the readers set if they would expire sooner; with
// minToken > 0, only if the fencing counter has reached it (Resume):
//
//	WATCH lock readers; GET lock; PTTL lock; TIME; ZRANGE readers -2 -1; ZSCORE readers owner; [GET counter]
//	MULTI; ZADD readers XX expiry owner; [PEXPIRE lock]; PEXPIRE readers; EXEC
func (d *watchDriver) extendShared(ctx context.Context, lk, owner string, ttl time.Duration, minToken uint64) error {
	rk := readersKey(lk)
	ms := px(ttl).Milliseconds()
	return d.retryAborted(ctx, "refresh", lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var (
				rs      *readerState
				score   *redis.FloatCmd
				counter *redis.StringCmd
			)
			err := watchAndRead(ctx, tx, []string{lk, rk}, func(p redis.Pipeliner) {
				rs = readReaders(ctx, p, lk)
				score = p.ZScore(ctx, rk, owner)
				if minToken > 0 {
					counter = p.Get(ctx, counterKey(lk))
				}
			})
			if err != nil {
				return err
			}
			now := rs.nowMS()
			if rs.get.Val() != redisx.Readers || score.Err() != nil || int64(score.Val()) < now {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			if counter != nil {
				if c, err := counter.Uint64(); err == nil && c < minToken {
					unwatch(ctx, tx)
					return driver.ErrNotHeld
				}
			}
			d.hook("refresh", lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				p.ZAddXX(ctx, rk, redis.Z{Score: float64(now + ms), Member: owner})
				if rs.pttl.Val().Milliseconds() < ms {
					p.Do(ctx, "pexpire", lk, ms)
				}
				p.Do(ctx, "pexpire", rk, max(ms, rs.pttl.Val().Milliseconds()))
			})
		})
	})
}
