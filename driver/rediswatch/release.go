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
type fromQueue struct {
	next string
	note bool // a resumed grant with a note (see noted)
}

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
		return d.releaseMember(ctx, memberKindOf(l), lk, l.Owner, tomb, max(px(l.TTL), 1), noted(l))
	}
	q, viaQueue := l.Data.(fromQueue)
	return d.release(ctx, lk, l.Owner, tomb, max(px(l.TTL), 1), q.next, viaQueue, l.Reentry, noted(l))
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
//
// Each transaction is read (readRelease, and releaseRead.readFirst when
// the guess was wrong), planned (planRelease) and executed (execRelease):
// see releaseTx.
func (d *watchDriver) release(ctx context.Context, lk, owner, tomb string, tombLife time.Duration, guess string, viaQueue, hold, note bool) error {
	q := releaseReq{lk: lk, owner: owner, tomb: tomb, tombLife: tombLife, guess: guess, viaQueue: viaQueue, hold: hold, note: note}
	return d.retryAborted(ctx, "release", lk, &d.stats.releaseAborts, func() error {
		return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error { return d.releaseTx(ctx, tx, &q) })
	})
}

// releaseReq is a release's request (see release).
type releaseReq struct {
	lk, owner string
	tomb      string        // the attempt's tombstone to set, "" for none
	tombLife  time.Duration // how long the tombstone lives
	guess     string        // the element likely first in line (see fromQueue), "" if unknown
	viaQueue  bool          // the grant came through the queue: delete its grant record
	hold      bool          // a hold of a named owner (see holds.go)
	note      bool          // the grant has a note: delete its field (see notes.go)
}

// releaseTx is one release transaction on tx.
func (d *watchDriver) releaseTx(ctx context.Context, tx *redis.Tx, q *releaseReq) error {
	r, err := readRelease(ctx, tx, q)
	if err != nil {
		return err
	}
	pl, err := planRelease(q, &r)
	if err == nil && pl.action == releaseReadFirst {
		if err = r.readFirst(ctx, tx, q.lk); err != nil {
			return err
		}
		pl, err = planRelease(q, &r)
	}
	if err != nil {
		unwatch(ctx, tx)
		return err
	}
	switch pl.action {
	case releaseNotHeld:
		unwatch(ctx, tx)
		return driver.ErrNotHeld
	case releaseDropHold:
		d.hook("release", q.lk)
		return exec(ctx, tx, func(p redis.Pipeliner) { p.HDel(ctx, holdsKey(q.lk), q.owner) })
	}
	return d.execRelease(ctx, tx, q, &r, &pl)
}

// releaseRead is what a release reads under its watch.
type releaseRead struct {
	holder  value // the lock key
	ownHold bool  // (a hold) owner is one of the holds
	holds   int64 // (a hold) the holds' hash length, "t" included
	first   string
	// entryOf is the owner whose entry, with the counter and the clock,
	// was read ("" none): the guess's, or the first waiter's (readFirst).
	entryOf string
	entry   value
	counter value
	now     time.Time
}

// readRelease watches the lock key (a hold's also the holds; with a guess,
// the counter and the guess's entry), sets the tombstone q asks for, and
// reads what releaseRead holds, in one round trip.
func readRelease(ctx context.Context, tx *redis.Tx, q *releaseReq) (releaseRead, error) {
	ck, hk := counterKey(q.lk), holdsKey(q.lk)
	guessOwner, _ := splitElem(q.guess)
	watch := make([]string, 1, 4)
	watch[0] = q.lk
	if q.hold {
		watch = append(watch, hk)
	}
	if q.guess != "" {
		watch = append(watch, ck, waitEntry(q.lk, guessOwner))
	}
	var c struct {
		get, counter, entry *redis.StringCmd
		line                *redis.StringSliceCmd
		now                 *redis.TimeCmd
		held                *redis.BoolCmd
		holds               *redis.IntCmd
	}
	err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
		if q.tomb != "" {
			p.Set(ctx, q.tomb, "", q.tombLife)
		}
		c.get = p.Get(ctx, q.lk)
		if q.hold {
			c.held, c.holds = p.HExists(ctx, hk, q.owner), p.HLen(ctx, hk)
		}
		c.line = p.LRange(ctx, waitQueue(q.lk), 0, 0)
		if q.guess != "" {
			c.counter, c.now = p.Get(ctx, ck), p.Time(ctx)
			c.entry = p.Get(ctx, waitEntry(q.lk, guessOwner))
		}
	})
	if err != nil {
		return releaseRead{}, err
	}
	r := releaseRead{holder: valueOf(c.get)}
	if q.hold {
		r.ownHold, r.holds = c.held.Val(), c.holds.Val()
	}
	if line := c.line.Val(); len(line) > 0 {
		r.first = line[0]
	}
	if q.guess != "" {
		r.entryOf, r.entry, r.counter, r.now = guessOwner, valueOf(c.entry), valueOf(c.counter), c.now.Val()
	}
	return r, nil
}

// readFirst watches the counter and the entry of the waiter first in line
// and reads them with the server's clock, in one round trip, into r.
func (r *releaseRead) readFirst(ctx context.Context, tx *redis.Tx, lk string) error {
	owner, _ := splitElem(r.first)
	ck, entry := counterKey(lk), waitEntry(lk, owner)
	var c struct {
		counter, entry *redis.StringCmd
		now            *redis.TimeCmd
	}
	if err := watchAndRead(ctx, tx, []string{ck, entry}, func(p redis.Pipeliner) {
		c.counter, c.now, c.entry = p.Get(ctx, ck), p.Time(ctx), p.Get(ctx, entry)
	}); err != nil {
		return err
	}
	r.entryOf, r.entry, r.counter, r.now = owner, valueOf(c.entry), valueOf(c.counter), c.now.Val()
	return nil
}

// releaseAction is what a release does, as planRelease decides it.
type releaseAction int

const (
	releaseNotHeld   releaseAction = iota // owner does not hold the key: UNWATCH
	releaseDropHold                       // other holds are left: remove owner's (HDEL)
	releaseReadFirst                      // the first waiter is not the one read: readFirst, then plan again
	releaseWakeAll                        // no one is queued: delete, and "" on the key's channel
	releaseDropDead                       // the first waiter is dead: delete, remove it, "" on the key's channel
	releaseNameFirst                      // the first waiter's entry cannot be handed over to: delete, and name it
	releaseHandOver                       // delete, and hand the key over to the first waiter
)

// releasePlan is what a release does, and for a hand-over, the new
// holder's TTL and token.
type releasePlan struct {
	action releaseAction
	h      handOver
}

// planRelease decides the release q from what it read, r. It fails when
// the fencing counter is not an integer (see nextToken).
func planRelease(q *releaseReq, r *releaseRead) (releasePlan, error) {
	if q.hold {
		if !r.holder.ok || !driver.SameOwner(r.holder.s, q.owner) || !r.ownHold {
			return releasePlan{action: releaseNotHeld}, nil
		}
		if r.holds > 2 { // holds are left ("t" is not one)
			return releasePlan{action: releaseDropHold}, nil
		}
	} else if !r.holder.ok || r.holder.s != q.owner {
		return releasePlan{action: releaseNotHeld}, nil
	}
	if r.first == "" {
		return releasePlan{action: releaseWakeAll}, nil
	}
	if owner, _ := splitElem(r.first); owner != r.entryOf {
		return releasePlan{action: releaseReadFirst}, nil
	}
	h, ok, err := planHandOver(r.entry, r.counter, r.now)
	switch {
	case err != nil:
		return releasePlan{}, err
	case ok:
		return releasePlan{action: releaseHandOver, h: h}, nil
	case !r.entry.ok:
		return releasePlan{action: releaseDropDead}, nil
	}
	return releasePlan{action: releaseNameFirst}, nil
}

// queue queues the writes of pl (one of the actions that delete the key)
// for the MULTI/EXEC of q, where first is the element first in line and
// holder the lock key's value as read (a hold's: the first hold, whose
// note is the grant's), and
// returns the DEL of the lock key, whose reply tells whether owner held it.
func (pl *releasePlan) queue(ctx context.Context, p doer, q *releaseReq, first, holder string) (del *redis.Cmd) {
	del = p.Do(ctx, "del", q.lk)
	if q.hold {
		// The last hold: the grant, and the first hold's note, end.
		p.Do(ctx, "del", holdsKey(q.lk))
		p.Do(ctx, "hdel", notesKey(q.lk), holder)
	} else if q.note {
		p.Do(ctx, "hdel", notesKey(q.lk), q.owner)
	}
	if q.viaQueue {
		p.Do(ctx, "del", grantRecord(q.lk, q.owner))
	}
	switch pl.action {
	case releaseWakeAll:
		wake(ctx, p, q.lk, "")
	case releaseDropDead:
		p.Do(ctx, "lrem", waitQueue(q.lk), 1, first)
		wake(ctx, p, q.lk, "")
	case releaseNameFirst:
		wake(ctx, p, q.lk, first)
	case releaseHandOver:
		owner, _ := splitElem(first)
		tok := strconv.FormatInt(pl.h.token, 10)
		p.Do(ctx, "set", q.lk, owner, "px", pl.h.ttl)
		p.Do(ctx, "set", counterKey(q.lk), tok, "px", fenceLife.Milliseconds())
		p.Do(ctx, "lrem", waitQueue(q.lk), 1, first)
		p.Do(ctx, "del", waitEntry(q.lk, owner))
		p.Do(ctx, "set", grantRecord(q.lk, owner), tok, "px", redisx.EntryLifeMS)
		wake(ctx, p, q.lk, first)
	}
	return del
}

// execRelease runs the release pl in MULTI/EXEC on tx.
func (d *watchDriver) execRelease(ctx context.Context, tx *redis.Tx, q *releaseReq, r *releaseRead, pl *releasePlan) error {
	d.hook("release", q.lk)
	var del *redis.Cmd
	if err := exec(ctx, tx, func(p redis.Pipeliner) { del = pl.queue(ctx, p, q, r.first, r.holder.s) }); err != nil {
		return err
	}
	if pl.action == releaseHandOver {
		d.stats.handOvers.Add(1)
	}
	if del.Val() != int64(1) {
		// The key expired after GET, on a server that does not abort
		// the EXEC for it: it was not owner's any more (the hand-over
		// is still right: the key was free).
		return driver.ErrNotHeld
	}
	return nil
}

// wake queues the wake-up message (see redisx.Wake) that names the
// waiter of the queue element elem, or no one when elem is "".
func wake(ctx context.Context, p doer, lk, elem string) {
	p.Do(ctx, wakeArgs(lk, elem)...)
}

// wakeArgs is the PUBLISH of the wake-up message that names the waiter of
// the queue element elem (on its inbox, or on lk's channel without one),
// or no one (on lk's channel) when elem is "": the one place this driver
// builds the message.
func wakeArgs(lk, elem string) []any {
	owner, inbox := splitElem(elem)
	ch, msg := redisx.Wake(lk, owner, inbox)
	return []any{"publish", ch, msg}
}

// handOver is what a release needs to hand the key over.
type handOver struct {
	ttl   int64 // the new holder's TTL in ms
	token int64
}

// planHandOver reads the first waiter's entry ("TTL 0"; see queue.go) and
// the fencing counter. It returns false when the entry is missing (the
// waiter is dead), or is a share's or a permit waiter's, or has no TTL
// (written by an older version of this driver).
func planHandOver(entry, counter value, now time.Time) (handOver, bool, error) {
	if !entry.ok {
		return handOver{}, false, nil
	}
	ttl, _, ok := strings.Cut(entry.s, " ")
	ms, err := strconv.ParseInt(ttl, 10, 64)
	if !ok || err != nil || ms <= 0 {
		return handOver{}, false, nil
	}
	token, err := nextToken(counter, now)
	if err != nil {
		return handOver{}, false, err
	}
	return handOver{ttl: ms, token: token}, true, nil
}

// nextToken is the fencing token of a grant, from the counter and the
// server's clock read under WATCH (see Acquire): the clock in microseconds,
// or the counter plus one when that is more.
func nextToken(counter value, now time.Time) (int64, error) {
	var last int64 // a missing counter counts as 0
	if counter.ok {
		var err error
		if last, err = strconv.ParseInt(counter.s, 10, 64); err != nil {
			return 0, fmt.Errorf("rediswatch: fencing counter holds %q, not an integer", counter.s)
		}
	}
	return max(last+1, now.UnixMicro()), nil
}
