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

// execSent marks, in driver.Lease.Data, an Acquire that sent its
// transaction: only then can a grant exist that the caller did not learn
// of, and only then does the clean-up Release that follows a failure need
// to reach the server.
type execSent struct{}

// markSent records whether a grant's EXEC was sent (whose reply has not
// come): in the queued wait's state, or as execSent.
func markSent(l *driver.Lease, sent bool) {
	if s, ok := l.Data.(*waiting); ok {
		s.sent = sent
	} else if sent {
		l.Data = execSent{}
	} else {
		l.Data = nil
	}
}

// wasSent reports what markSent recorded.
func wasSent(l *driver.Lease) bool {
	switch s := l.Data.(type) {
	case execSent:
		return true
	case *waiting:
		return s.sent
	}
	return false
}

// fenceLife is how long a fencing counter outlives the last grant that set
// it to the clock (nearly every grant), redisnx's FENCE_LIFE_MS.
const fenceLife = 7 * 24 * time.Hour

// Acquire makes one attempt at the grant, in two round trips:
//
//	WATCH counter tombstone; GET lock; GET counter; TIME; LRANGE queue 0 1
//	MULTI; SET lock owner NX PX ttl; SET counter token PX 7d; EXEC
//
// When GET finds the key held, it sends UNWATCH and PTTL instead of the
// transaction and returns a *driver.HeldError with the holder's PTTL. When the
// transaction is aborted (the counter changed after WATCH: another client
// was granted the key first) or its SET NX finds the key taken meanwhile,
// it returns a *driver.HeldError without a hint; lock retries, as for a
// held key.
//
// A free key with a live waiter queued first (see queue.go) is that
// waiter's: the attempt is refused with a *driver.HeldError, after a third
// round trip that looks at the waiter's entry (WATCH entry; EXISTS entry)
// and UNWATCH. A dead waiter's place is taken by the attempt, which removes
// it from the queue in the transaction.
//
// The token is the server's clock in microseconds, or the counter plus one
// when that is more (redisnx's rule), and the counter is set to it, so
// tokens keep increasing when the counter was lost (restart, eviction,
// expiry) or lags (a promoted replica). The counter is watched, so no
// other grant comes in between. Setting it gives it an expiry of
// fenceLife, so that keys locked once do not keep a counter forever.
//
// The lock key is not watched: NX makes the grant conditional on the
// server, and the counter's write in the same transaction keeps token
// order and grant order the same. Watching it would abort grants attempted as the
// holder's grant expires (Redis counts a watched key's expiry as a
// change), which is exactly when waiters retry, at the holder's PTTL. A
// SET NX that fails inside the transaction still moves the counter on,
// which fencing allows. The tombstone is watched so that this EXEC, if it
// reaches the server after the caller gave up on it, is aborted by the
// clean-up Release (see there). A transaction that also changes the queue
// does watch the lock key: the queue must change only with a grant.
func (d *watchDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	if l.Reentrant {
		return d.acquireHold(ctx, l)
	}
	_, err := d.acquire(ctx, l, tryOnce, "", "")
	return err
}

// attempt is how acquire treats the key's queue.
type attempt int

const (
	// tryOnce: Acquire's single attempt, which takes a dead waiter's place.
	tryOnce attempt = iota
	// tryThenJoin: Join's attempt, which joins the queue when the key is
	// held or someone is queued, in the round trip that would have
	// released the watch, under that watch (see readAndJoin): the
	// tombstone's aborts a join that comes after the attempt's Leave.
	tryThenJoin
	// queued: the attempt of a caller in the queue, which leaves it in the
	// transaction that grants it the key.
	queued
)

// acquire makes an attempt of kind how; joined reports that a tryThenJoin
// attempt joined the queue, where inbox is the channel to name the caller
// on (see queueElem) and entry the value of its queue entry (see
// entryValue).
//
// A queued attempt that finds the key its own was handed the key by a
// release (whose message, if it came, only woke it): it extends the key to
// its TTL (the validity counts from this call), takes the token from the
// grant record, and leaves the queue, in the transaction. (When the record
// expired, it takes a new token.) The record is this wait's: every join
// deletes the owner's record (see joinCmds), and only a hand-over writes
// it, with the key.
func (d *watchDriver) acquire(ctx context.Context, l *driver.Lease, how attempt, inbox, entry string) (joined bool, err error) {
	if l.Mode != driver.Exclusive { // a share or a permit
		return d.acquireMember(ctx, l, how, inbox, entry)
	}
	markSent(l, false)
	lk := d.LockKey(l.Key)
	ck := counterKey(lk)
	wq := waitQueue(lk)
	ttl := px(l.TTL)
	var (
		granted bool
		token   int64
		next    string // the element behind the caller, for its release
	)
	err = d.onConn(ctx, lk, func(tx *redis.Tx) error {
		joined, next = false, ""
		var (
			get     *redis.StringCmd
			counter *redis.StringCmd
			now     *redis.TimeCmd
			line    *redis.StringSliceCmd
			record  *redis.StringCmd
		)
		watch := []string{ck, tombstone(lk, l.Owner)}
		if how == queued {
			// The queue changes only with the grant: watch the key too.
			watch = append(watch, lk)
		}
		err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
			get = p.Get(ctx, lk)
			counter = p.Get(ctx, ck)
			now = p.Time(ctx)
			line = p.LRange(ctx, wq, 0, 1)
			if how == queued {
				record = p.Get(ctx, grantRecord(lk, l.Owner))
			}
		})
		if err != nil {
			return err
		}
		var head string // "" when no one is queued
		if q := line.Val(); len(q) > 0 {
			head = q[0]
		}
		first, _ := splitElem(head)
		if how == tryThenJoin && (get.Err() == nil || first != "") {
			pttl, err := d.readAndJoin(ctx, tx, lk, l.Owner, inbox, entry)
			if err != nil {
				return err
			}
			joined = true
			if get.Err() != nil {
				return &driver.HeldError{} // free, but others queued first
			}
			return heldFor(pttl)
		}
		mine := how == queued && get.Err() == nil && get.Val() == l.Owner
		stale := "" // the members' set of a stale marker the grant replaces
		if get.Err() == nil && !mine {
			if set := markerSet(lk, get.Val()); set != "" {
				gone, err := membersGone(ctx, tx, lk, set, get.Val(), now)
				if err != nil {
					return err
				}
				if gone {
					stale = set
				}
			}
			if stale == "" {
				// The UNWATCH costs a round trip anyway: read the PTTL with
				// it, rather than on every grant.
				return heldFor(unwatchPTTL(ctx, tx, lk))
			}
		}
		var dead string // a dead waiter queued first
		if !mine {
			if dead, err = firstInLine(ctx, tx, lk, l.Owner, head); err != nil {
				return err
			}
		}
		next = behind(line.Val(), l.Owner, dead)
		fresh := true // a new token, not the grant record's
		if mine && record.Err() == nil {
			if token, err = strconv.ParseInt(record.Val(), 10, 64); err == nil && token > 0 {
				fresh = false
			}
		}
		if fresh {
			if token, err = nextToken(counter, now); err != nil {
				unwatch(ctx, tx)
				return fmt.Errorf("%w (%s)", err, errtext.Quote(ck))
			}
		}
		markSent(l, true)
		d.hook("grant", lk)
		var set *redis.Cmd
		err = exec(ctx, tx, func(p redis.Pipeliner) {
			switch {
			case mine:
				set = p.Do(ctx, "pexpire", lk, ttl.Milliseconds())
			case stale != "":
				// The marker of members that all expired (watched since
				// membersGone read it): the key is free.
				p.Del(ctx, stale)
				set = p.Do(ctx, "set", lk, l.Owner, "px", ttl.Milliseconds())
			default:
				set = p.Do(ctx, "set", lk, l.Owner, "nx", "px", ttl.Milliseconds())
			}
			if fresh {
				p.Do(ctx, "set", ck, strconv.FormatInt(token, 10), "px", fenceLife.Milliseconds())
			}
			if dead != "" {
				p.LRem(ctx, wq, 1, dead)
			}
			if how == queued {
				leaveCmds(ctx, p, lk, l.Owner, inbox)
			}
		})
		if err != nil {
			return err
		}
		// A refused SET NX replies nil; a PEXPIRE of a key that expired
		// after GET (on servers that do not abort the EXEC for it), 0.
		granted = set.Err() == nil && (!mine || set.Val() == int64(1))
		return nil
	})
	if how != tryOnce && (err == nil || errors.Is(err, errAborted)) {
		markSent(l, false) // the reply came: Leave has no grant to remove
	}
	switch {
	case errors.Is(err, errAborted):
		d.stats.grantAborts.Add(1)
		return false, &driver.HeldError{}
	case err != nil:
		return joined, redisx.WithCtx(ctx, err)
	case !granted:
		return false, &driver.HeldError{}
	}
	l.Token = uint64(token)
	l.Validity = ttl
	if how == queued {
		l.Data = fromQueue{next: next}
	}
	return false, nil
}

// markerSet returns the set of members that the lock key's value v
// stands for (readers' R, a semaphore's S<N>), or "" when v is an owner
// token or anything else.
func markerSet(lk, v string) string {
	if v == redisx.Readers {
		return readersKey(lk)
	}
	if len(v) > 1 && v[0] == 'S' {
		if _, err := strconv.Atoi(v[1:]); err == nil {
			return permitsKey(lk)
		}
	}
	return ""
}

// membersGone reports whether the marker v that lk holds is stale: every
// member of set expired before now (the server's clock at the attempt's
// read, so no later than the truth). The members' releases do not shorten
// the lock key's PX, so a marker can outlive its members by up to the
// longest TTL ever granted (a crashed member's, say); an exclusive attempt
// then takes the key instead of waiting for that PX, as redisnx's scripts
// do. It adds lk and set to the watch, in one round trip, so that the
// grant's EXEC aborts if a member came, or the marker changed, since; when
// the marker is live it releases the watch. It costs a round trip only
// when the key holds a marker.
func membersGone(ctx context.Context, tx *redis.Tx, lk, set, v string, now *redis.TimeCmd) (bool, error) {
	var (
		cur    *redis.StringCmd
		latest *redis.ZSliceCmd
	)
	if err := watchAndRead(ctx, tx, []string{lk, set}, func(p redis.Pipeliner) {
		cur = p.Get(ctx, lk)
		latest = p.ZRangeWithScores(ctx, set, -1, -1)
	}); err != nil {
		return false, err
	}
	t, err := now.Result()
	if err != nil || cur.Err() != nil || cur.Val() != v {
		return false, nil
	}
	nowMs := float64(t.UnixMilli())
	for _, z := range latest.Val() {
		if z.Score >= nowMs {
			return false, nil
		}
	}
	return true, nil
}

// firstInLine checks the waiter queued first (head, "" if none) for an
// attempt of owner: it returns a *driver.HeldError, with the watch
// released, when another live waiter is first; else the element of a dead
// waiter first in line (whose place the attempt takes), or "".
func firstInLine(ctx context.Context, tx *redis.Tx, lk, owner, head string) (dead string, err error) {
	return firstInLineFor(ctx, tx, lk, owner, head, 0)
}

// firstInLineFor is firstInLine for an attempt at a permit of a semaphore
// of limit permits (0: an attempt of another kind). A permit attempt reads
// the first waiter's entry, not only whether it exists, and fails with an
// error wrapping driver.ErrInvalid, with the watch released, when that
// waiter waits for a permit of another limit.
func firstInLineFor(ctx context.Context, tx *redis.Tx, lk, owner, head string, limit int) (dead string, err error) {
	first, _ := splitElem(head)
	if first == "" || first == owner {
		return "", nil
	}
	alive, value, err := watchAlive(ctx, tx, lk, waitEntry(lk, first), limit > 0)
	if err != nil {
		return "", err
	}
	if alive {
		unwatch(ctx, tx)
		if n, ok := entryLimit(value); ok && limit > 0 && n != limit {
			return "", limitMismatch(n, limit)
		}
		return "", &driver.HeldError{}
	}
	return head, nil
}

// behind returns the element of the waiter that will be first in line once
// owner is granted (and dead removed): the likely first at its release.
func behind(line []string, owner, dead string) string {
	for _, e := range line {
		if o, _ := splitElem(e); o != owner && e != dead {
			return e
		}
	}
	return ""
}

// watchAlive watches the lock key lk and a waiter's entry, and reports
// whether the entry exists (the waiter is alive), in one round trip, and
// with read set its value (GET rather than EXISTS). lk is watched too
// because the transaction that follows takes a dead waiter's place, which
// it must do only with the grant.
func watchAlive(ctx context.Context, tx *redis.Tx, lk, entry string, read bool) (alive bool, value string, err error) {
	var (
		n   *redis.IntCmd
		get *redis.StringCmd
	)
	err = watchAndRead(ctx, tx, []string{lk, entry}, func(p redis.Pipeliner) {
		if read {
			get = p.Get(ctx, entry)
		} else {
			n = p.Exists(ctx, entry)
		}
	})
	switch {
	case err != nil:
		return false, "", err
	case read:
		return get.Err() == nil, get.Val(), nil
	}
	return n.Val() > 0, "", nil
}

// unwatchPTTL releases the watch and reads lock's PTTL, in one round trip;
// -1 when it has no expiry or cannot be read.
func unwatchPTTL(ctx context.Context, tx *redis.Tx, lk string) time.Duration {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unwatchTimeout)
	defer cancel()
	var pttl *redis.DurationCmd
	if _, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "unwatch")
		pttl = p.PTTL(ctx, lk)
		return nil
	}); err != nil {
		return -1
	}
	return pttl.Val()
}

// heldFor is the error for a key held for pttl more (as PTTL reports it:
// whole milliseconds, rounded down; negative without an expiry). The hint
// is a millisecond later, when the key is surely free.
func heldFor(pttl time.Duration) error {
	if pttl < 0 {
		return &driver.HeldError{}
	}
	return &driver.HeldError{RetryAfter: pttl + time.Millisecond}
}
