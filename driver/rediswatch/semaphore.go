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

// Permits of counting semaphores (driver.Permit), in the layout both Redis
// drivers share (internal/redisx), so that their permits of a key count
// together: while permits of a semaphore of N are held, the lock key holds
// redisx.PermitsValue(N) ("S<N>", never an owner, nor "R") with a PX as
// long as the longest live permit's, so every exclusive or shared attempt
// (and a plain SET NX lock) finds it held; each permit is a member of
// P{K}:s, scored by when it expires (server clock, ms). A permit expires
// on its own; an expired member holds nothing, and "S<N>" with no live
// member left is free for permits (exclusive and shared attempts wait for
// its PX, which the permits' transactions keep to the longest live one).
//
// Permits are shares with a cap, and are done as shares are (shared.go):
// the same transactions, with the set P{K}:s and the count of live members
// checked against the limit. Permit waiters queue like readers (entries
// "pLIMIT:TTL N"): a release never hands the key to one, it names the
// first waiter, which takes a permit with its own attempt, and each
// permit's grant from the queue names the waiter behind it, so that permit
// waiters in a row follow one another in, up to the limit.

func permitsKey(lk string) string { return lk + redisx.PermitsSuffix }

// Semaphores implements driver.Semaphorer.
func (d *watchDriver) Semaphores() error { return nil }

// permitLimit is l's semaphore limit for a permit, 0 for other leases.
func permitLimit(l *driver.Lease) int {
	if l.Mode != driver.Permit {
		return 0
	}
	return l.Limit
}

// lockLimit returns N when v, a lock key's value, is redisx.PermitsValue(N).
func lockLimit(v string) (int, bool) {
	s, ok := strings.CutPrefix(v, "S")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

// entryPermitMode is the mode prefix of a permit waiter's queue entry,
// "pLIMIT:" (see queue.go); no release parses it as a TTL, so none hands
// the key to it.
func entryPermitMode(limit int) string { return "p" + strconv.Itoa(limit) + ":" }

// entryLimit returns the limit of a permit waiter's queue entry value.
func entryLimit(v string) (int, bool) {
	s, ok := strings.CutPrefix(v, "p")
	if !ok {
		return 0, false
	}
	s, _, ok = strings.Cut(s, ":")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0
}

// limitMismatch is the error of a permit attempt of limit want on a key
// whose permits (granted or waiting) have limit have.
func limitMismatch(have, want int) error {
	return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrInvalid, have, want)
}

// permitReads is what a queued permit waiter's renewal reads of the
// permits of a key, for permitRoom.
type permitReads struct {
	now      *redis.TimeCmd
	nth, top *redis.ZSliceCmd
}

// readPermitRoom queues the reads of permitRoom for a semaphore of limit
// permits: the server's clock, the limit-th latest expiry and the latest.
func readPermitRoom(ctx context.Context, p redis.Pipeliner, lk string, limit int) *permitReads {
	sk := permitsKey(lk)
	return &permitReads{
		now: p.Time(ctx),
		nth: p.ZRangeWithScores(ctx, sk, -int64(limit), -int64(limit)),
		top: p.ZRangeWithScores(ctx, sk, -1, -1),
	}
}

// permitRoom reports whether a lock key holding v leaves room for a permit
// of limit: v is "S<N>" and no permit is live (stale: free), or N is not
// limit (the attempt will say so), or fewer than limit are live.
func permitRoom(v string, r *permitReads, limit int) bool {
	n, ok := lockLimit(v)
	if !ok {
		return false
	}
	now := r.now.Val().UnixMilli()
	if !liveAt(r.top.Val(), now) {
		return true
	}
	return n != limit || !liveAt(r.nth.Val(), now)
}

// liveAt reports whether z, one member read with ZRANGE, exists and is
// live at now (ms).
func liveAt(z []redis.Z, now int64) bool {
	return len(z) > 0 && int64(z[0].Score) >= now
}

// tryPermit is tryShared for a permit: one attempt, which the caller
// (acquireShared) repeats when it is aborted.
//
//	WATCH lock counter tombstone; GET lock; PTTL lock; TIME; ZRANGE permits -2 -1 WITHSCORES;
//	      ZRANGE permits -N -N WITHSCORES; GET counter; LRANGE queue 0 1; EXISTS tombstone
//	MULTI; [DEL permits; SET lock S<N> PX ttl | PEXPIRE lock ttl]; ZREMRANGEBYSCORE permits (expired);
//	       ZADD permits expiry owner; PEXPIRE permits; SET counter token PX 7d;
//	       [LREM queue dead]; [leave the queue; wake the next waiter]; EXEC
//
// A permit is granted when the key is free (missing, or "S<M>" with no live
// permit: its set is deleted, with the expired permits of any limit), or
// holds "S<N>" with fewer than N live permits, and no live waiter is
// queued first. "S<M>" with live permits and M not N fails with an error
// wrapping driver.ErrInvalid, and so does a live first waiter for permits
// of another limit (the one queued waiter read cheaply); nothing is
// changed. The lock key is watched, as by a share's grant, and so is the
// counter, which every grant writes: no other grant can come in between,
// so the count read holds at EXEC (releases and expiries only lower it).
// When the permits are all taken, the hint is when the earliest of them
// expires.
func (d *watchDriver) tryPermit(ctx context.Context, l *driver.Lease, how attempt, inbox, entry string) (joined bool, err error) {
	markSent(l, false)
	lk := d.LockKey(l.Key)
	ck, wq, sk := counterKey(lk), waitQueue(lk), permitsKey(lk)
	ttl := px(l.TTL).Milliseconds()
	limit := l.Limit
	var (
		token int64
		next  string
	)
	err = d.onConn(ctx, lk, func(tx *redis.Tx) error {
		joined, next = false, ""
		var (
			ps      *readerState
			nth     *redis.ZSliceCmd
			counter *redis.StringCmd
			line    *redis.StringSliceCmd
			void    *redis.IntCmd
		)
		tomb := tombstone(lk, l.Owner)
		err := watchAndRead(ctx, tx, []string{lk, ck, tomb}, func(p redis.Pipeliner) {
			ps = readMembers(ctx, p, lk, sk)
			nth = p.ZRangeWithScores(ctx, sk, -int64(limit), -int64(limit))
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
		now := ps.nowMS()
		_, live := ps.liveOther(l.Owner)
		n, isPermits := lockLimit(ps.get.Val())
		isPermits = isPermits && ps.get.Err() == nil
		// permits: the key is a semaphore with live permits; else it is
		// free for a permit, or held by another kind of grant.
		permits := isPermits && live
		free := ps.get.Err() != nil || (isPermits && !live)
		if permits && n != limit {
			unwatch(ctx, tx)
			return limitMismatch(n, limit)
		}
		held := !free && !permits
		var retry time.Duration // when the earliest of limit live permits expires
		if permits && liveAt(nth.Val(), now) {
			held = true
			retry = time.Duration(int64(nth.Val()[0].Score)-now+1) * time.Millisecond
		}
		var head string
		if q := line.Val(); len(q) > 0 {
			head = q[0]
		}
		first, _ := splitElem(head)
		if how == tryThenJoin && (held || first != "") {
			pttl, err := unwatchAndJoin(ctx, tx, lk, l.Owner, inbox, entry)
			if err != nil {
				return err
			}
			joined = true
			switch {
			case retry > 0:
				return &driver.HeldError{RetryAfter: retry}
			case !held:
				return &driver.HeldError{} // room, but others queued first
			}
			return heldFor(pttl)
		}
		if held {
			if retry > 0 {
				unwatch(ctx, tx)
				return &driver.HeldError{RetryAfter: retry}
			}
			return heldFor(unwatchPTTL(ctx, tx, lk))
		}
		dead, err := firstInLineFor(ctx, tx, lk, l.Owner, head, limit)
		if err != nil {
			return err
		}
		next = behind(line.Val(), l.Owner, dead)
		if token, err = nextToken(counter, ps.now); err != nil {
			unwatch(ctx, tx)
			return fmt.Errorf("%w (%q)", err, ck)
		}
		keep := ttl // the lock key and the set live at least this long
		if permits {
			keep = max(keep, ps.pttl.Val().Milliseconds())
		}
		markSent(l, true)
		d.hook("grant", lk)
		return exec(ctx, tx, func(p redis.Pipeliner) {
			switch {
			case !permits: // free: a new semaphore, without stale members
				p.Del(ctx, sk)
				p.Do(ctx, "set", lk, redisx.PermitsValue(limit), "px", keep)
			case ps.pttl.Val().Milliseconds() < ttl:
				p.Do(ctx, "pexpire", lk, keep)
			}
			if permits {
				p.ZRemRangeByScore(ctx, sk, "-inf", "("+strconv.FormatInt(now, 10))
			}
			p.ZAdd(ctx, sk, redis.Z{Score: float64(now + ttl), Member: l.Owner})
			p.Do(ctx, "pexpire", sk, keep)
			p.Do(ctx, "set", ck, strconv.FormatInt(token, 10), "px", fenceLife.Milliseconds())
			if dead != "" {
				p.LRem(ctx, wq, 1, dead)
			}
			if how == queued {
				leaveCmds(ctx, p, lk, l.Owner, inbox)
				if next != "" {
					// A permit waiter behind may come in too: wake it.
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

// releasePermit ends owner's permit of lk, in two round trips:
//
//	WATCH lock permits; [SET tombstone]; GET lock; PTTL lock; TIME; ZRANGE permits -2 -1 WITHSCORES; ZSCORE permits owner; LRANGE queue 0 0
//	MULTI; ZREM permits owner; ZREMRANGEBYSCORE permits (expired); [PEXPIRE lock, permits to the last live permit];
//	       PUBLISH to the first waiter (or "" on the key's channel); EXEC     (other permits live)
//	MULTI; ZREM permits owner; DEL lock permits; PUBLISH to the first waiter (or "" on the key's channel); EXEC   (the last)
//
// A permit returned leaves room: the first waiter is named (it takes its
// permit with its own attempt, and wakes the one behind it), or, with no
// one queued, the key's channel is told, for waiters of other kinds
// (redisnx's, retry strategies). It returns driver.ErrNotHeld when owner
// had no live permit (an expired one, or one whose lock key is gone, is
// removed all the same).
func (d *watchDriver) releasePermit(ctx context.Context, lk, owner, tomb string, tombLife time.Duration) error {
	sk, wq := permitsKey(lk), waitQueue(lk)
	return d.retryAborted(ctx, "release", lk, &d.stats.releaseAborts, func() error {
		var held bool
		err := d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var (
				ps    *readerState
				score *redis.FloatCmd
				line  *redis.StringSliceCmd
			)
			err := watchAndRead(ctx, tx, []string{lk, sk}, func(p redis.Pipeliner) {
				if tomb != "" {
					p.Set(ctx, tomb, "", tombLife)
				}
				ps = readMembers(ctx, p, lk, sk)
				score = p.ZScore(ctx, sk, owner)
				line = p.LRange(ctx, wq, 0, 0)
			})
			if err != nil {
				return err
			}
			if score.Err() != nil {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			now := ps.nowMS()
			_, isPermits := lockLimit(ps.get.Val())
			isPermits = isPermits && ps.get.Err() == nil
			held = isPermits && int64(score.Val()) >= now
			last, others := ps.liveOther(owner)
			d.hook("release", lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				p.ZRem(ctx, sk, owner)
				if !isPermits {
					return // the lock key is gone, or another grant's
				}
				if others {
					p.ZRemRangeByScore(ctx, sk, "-inf", "("+strconv.FormatInt(now, 10))
					if rest := last - now; rest > 0 && rest < ps.pttl.Val().Milliseconds() {
						p.Do(ctx, "pexpire", lk, rest)
						p.Do(ctx, "pexpire", sk, rest)
					}
				} else {
					p.Del(ctx, lk, sk)
				}
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

// extendPermit extends owner's live permit of lk, whose lock key must
// hold "S<limit>", to ttl from now, and sets the lock key and the set to
// expire with the longest live permit (never before owner's); with
// minToken > 0, only if the fencing counter has reached it (Resume):
//
//	WATCH lock permits; GET lock; PTTL lock; TIME; ZRANGE permits -2 -1 WITHSCORES; ZSCORE permits owner; [GET counter]
//	MULTI; ZADD permits XX expiry owner; PEXPIRE lock keep; PEXPIRE permits keep; EXEC
//
// The set is watched, so a permit granted meanwhile (whose grant need not
// touch the lock key) aborts the transaction, which is tried again.
func (d *watchDriver) extendPermit(ctx context.Context, op, lk, owner string, limit int, ttl time.Duration, minToken uint64) error {
	sk := permitsKey(lk)
	ms := px(ttl).Milliseconds()
	want := redisx.PermitsValue(limit)
	return d.retryAborted(ctx, op, lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var (
				ps      *readerState
				score   *redis.FloatCmd
				counter *redis.StringCmd
			)
			err := watchAndRead(ctx, tx, []string{lk, sk}, func(p redis.Pipeliner) {
				ps = readMembers(ctx, p, lk, sk)
				score = p.ZScore(ctx, sk, owner)
				if minToken > 0 {
					counter = p.Get(ctx, counterKey(lk))
				}
			})
			if err != nil {
				return err
			}
			now := ps.nowMS()
			if ps.get.Err() != nil || ps.get.Val() != want || score.Err() != nil || int64(score.Val()) < now {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			if counter != nil {
				if c, err := counter.Uint64(); err == nil && c < minToken {
					unwatch(ctx, tx)
					return driver.ErrNotHeld
				}
			}
			keep := ms
			if last, ok := ps.liveOther(owner); ok {
				keep = max(keep, last-now)
			}
			d.hook(op, lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				p.ZAddXX(ctx, sk, redis.Z{Score: float64(now + ms), Member: owner})
				p.Do(ctx, "pexpire", lk, keep)
				p.Do(ctx, "pexpire", sk, keep)
			})
		})
	})
}
