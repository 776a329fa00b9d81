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

// A blocking Lock waits in a queue kept on the server with plain commands:
//
//	P{K}:wq          list of the queued owners, the first in line at its head
//	P{K}:we:OWNER    a queued owner's entry, "TTL 0", expiring
//	                 redisx.EntryLife after the waiter last renewed it (dead:
//	                 it lost its place); TTL in ms; a reader's is "sTTL 0", a
//	                 permit waiter's "pLIMIT:TTL 0" (LIMIT: its semaphore's
//	                 number of permits); the 0 stands where older versions
//	                 numbered the waiter's writes, so that their releases
//	                 read the entry
//	P{K}:wg:OWNER    the token of a grant handed over to OWNER, for
//	                 redisx.EntryLife; a join deletes it (a grant of an
//	                 earlier wait of the same owner is not this wait's)
//	P{K}:void:OWNER  the attempt's tombstone, "" (see Acquire): Leave sets it,
//	                 for max(TTL, redisx.EntryLife), when a join or renewal of
//	                 the waiter's may still be on its way (its reply did not
//	                 come); every join watches it from a round trip answered
//	                 before its EXEC is sent, so a join that reaches the
//	                 server after Leave is aborted and changes nothing
//
// A free key with a live waiter first in line is that waiter's: every
// other attempt is refused (see acquire). A release hands the key to the
// first waiter in its transaction (see release) and names it on its
// Locker's inbox. The message only wakes the waiter: anyone allowed to
// publish on the channel could send it, so it grants nothing. The waiter
// named reads the key its own and takes the token from the grant record
// (see claim), or its attempt finds the key its own, extends it to the TTL
// and takes the token (see acquire). No transaction watches the queue, so
// joining and leaving never abort a grant or a release: what must not
// change under a grant is watched instead (the lock key, and the entry of
// the waiter it goes to or of a dead waiter whose place it takes).

// waiting is a queued Lock call's state, in driver.Lease.Data until it is
// granted.
type waiting struct {
	w       *redisx.Waiter // nil until the first attempt found the key held
	renewed time.Time      // when the entry was last made or renewed
	hintAt  time.Time      // when the holder's grant expires, if known
	sent    bool           // a grant's EXEC was sent and its reply did not come
	unknown bool           // a join or renewal was sent whose reply did not come
}

// errAbandoned: a join found the attempt's tombstone. Only the clean-up of
// the same attempt sets it (Leave, or the Release after a grant whose reply
// was lost), and lock runs it last; seeing it means the server's data is
// not what this attempt wrote.
var errAbandoned = errors.New("rediswatch: join: attempt abandoned")

// write starts a request that writes the entry (a join or a renewal): it
// returns the entry's value, for l's TTL, and marks the entry unknown
// until wrote.
func (s *waiting) write(l *driver.Lease) (value string, at time.Time) {
	s.unknown = true
	mode := ""
	switch l.Mode {
	case driver.Shared:
		mode = "s" // no release hands the key to it (see shared.go)
	case driver.Permit:
		mode = entryPermitMode(l.Limit) // nor to it (see semaphore.go)
	}
	return mode + strconv.FormatInt(px(l.TTL).Milliseconds(), 10) + " 0", time.Now()
}

// wrote records that the request sent at at wrote the entry.
func (s *waiting) wrote(at time.Time) {
	s.unknown, s.renewed = false, at
}

// Join implements driver.Queuer: a plain attempt that joins the queue, in
// the round trip that ends it, if the key is held. It subscribes once the
// key is found held (the key is often free), and the confirmation of the
// subscriptions wakes it to try again: a release may have come before
// them. When the key's channel is subscribed and confirmed already (other
// waiters of this Locker queued on it lately: the key is busy), it
// subscribes first, so that the join names its inbox.
func (d *watchDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	lk := d.LockKey(l.Key)
	s := &waiting{}
	l.Data = s
	listen := func() (err error) {
		s.w, err = d.Notify.Queue(lk, l.Owner, wake)
		return err
	}
	if d.Notify.Confirmed(lk) && l.Mode == driver.Exclusive {
		if err := listen(); err != nil {
			return err
		}
	}
	entry, at := s.write(l)
	joined, err := d.acquire(ctx, l, tryThenJoin, s.inbox(), entry)
	if err == nil {
		s.stop()
		return nil
	}
	var held *driver.HeldError
	if !errors.As(err, &held) {
		if errors.Is(err, driver.ErrInvalid) {
			s.unknown = false // refused on what it read: it joined nothing
		}
		return err
	}
	s.hint(held)
	if !joined {
		// The attempt's transaction was aborted: join now.
		entry, at = s.write(l)
		if err := d.join(ctx, lk, l.Owner, s.inbox(), entry, waitNoteOf(l)); err != nil {
			return redisx.WithCtx(ctx, err)
		}
	}
	s.wrote(at)
	if s.w == nil {
		if err := listen(); err != nil {
			return err
		}
	}
	return s.held()
}

// Check implements driver.Queuer: an attempt when a release named the
// waiter (or no one), when the subscriptions were confirmed, or when the
// holder's grant is due to expire; else, or when the entry is due for
// renewal, a renewal that also reads the key and its PTTL, and an attempt
// if the key is free, is the waiter's own (handed over by a release whose
// message was missed) or the entry had died (the waiter joins again, at
// the end). That finds a release whose message was lost, a release by a
// client that names no one (redisnx, redsync, redislock), and a dead
// waiter in first place (the key stays free), whose place the attempt
// takes. A message never grants: the attempt reads the grant. After a
// message that named the waiter, the attempt is a claim first (one round
// trip of reads, see claim), and the full attempt only if that finds no
// grant.
func (d *watchDriver) Check(ctx context.Context, l *driver.Lease) error {
	s := l.Data.(*waiting)
	lk := d.LockKey(l.Key)
	named := s.w.Named() // before News: a message sets named, then news
	try := s.w.News() || (!s.hintAt.IsZero() && !time.Now().Before(s.hintAt))
	if try && named && l.Mode == driver.Exclusive && l.Note == "" && !l.Reentry {
		// A release named this waiter: it likely handed it the key.
		ok, err := d.claim(ctx, l)
		if err != nil {
			return redisx.WithCtx(ctx, err)
		}
		if ok {
			s.stop()
			return nil
		}
	}
	for {
		if try {
			_, err := d.acquire(ctx, l, queued, s.w.Inbox(), "")
			if err == nil {
				s.stop()
				return nil
			}
			var held *driver.HeldError
			if !errors.As(err, &held) {
				return err
			}
			s.hint(held)
			if time.Since(s.renewed) < driver.Heartbeat {
				return s.held()
			}
		}
		entry, at := s.write(l)
		r, err := d.renew(ctx, lk, l.Owner, s.inbox(), entry, permitLimit(l), l.Mode == driver.Exclusive, waitNoteOf(l))
		if err != nil {
			return redisx.WithCtx(ctx, err)
		}
		s.wrote(at)
		if try || !(r.rejoined || r.free || r.mine) {
			s.hintAt = time.Time{}
			if r.pttl >= 0 {
				s.hintAt = time.Now().Add(r.pttl + time.Millisecond)
			}
			return s.held()
		}
		try = true
	}
}

// inbox is the channel releases are to name the waiter on: its Locker's
// inbox once subscribed, else "" (the key's channel).
func (s *waiting) inbox() string {
	if s.w != nil && s.w.InboxReady() {
		return s.w.Inbox()
	}
	return ""
}

func (s *waiting) hint(held *driver.HeldError) {
	s.hintAt = time.Time{}
	if held.RetryAfter > 0 {
		s.hintAt = time.Now().Add(held.RetryAfter)
	}
}

// held is the result of a step that leaves the waiter queued.
func (s *waiting) held() error {
	if s.hintAt.IsZero() {
		return &driver.HeldError{}
	}
	return &driver.HeldError{RetryAfter: max(time.Until(s.hintAt), time.Millisecond)}
}

func (s *waiting) stop() {
	if s.w != nil {
		s.w.Stop()
	}
}

// joinCmds queues the commands that put owner at the end of lk's queue
// with a fresh entry (value: see write), for a MULTI/EXEC: no one may see
// the owner queued without its entry (it would count as dead). It also
// deletes owner's grant record: a record left by an earlier wait of the
// same owner (a grant that expired before it was taken) is not this
// wait's. inbox is where releases are to name owner ("": on the key's
// channel). The transaction must watch the attempt's tombstone, from a
// round trip answered before (see queue.go).
func joinCmds(ctx context.Context, p redis.Pipeliner, lk, owner, inbox, value string, wn waitNote, notes time.Duration) {
	wq := waitQueue(lk)
	p.Do(ctx, "lrem", wq, 0, owner)
	if inbox != "" {
		p.Do(ctx, "lrem", wq, 0, queueElem(owner, inbox))
	}
	p.Do(ctx, "set", waitEntry(lk, owner), value, "px", redisx.EntryLifeMS)
	p.Do(ctx, "del", grantRecord(lk, owner)) // untyped, as all: readAndJoin reads "QUEUED"
	p.Do(ctx, "rpush", wq, queueElem(owner, inbox))
	p.Do(ctx, "pexpire", wq, 2*redisx.EntryLifeMS)
	if wn.note != "" {
		noteCmds(ctx, p, lk, owner, wn.note, notes, wn.life)
	}
}

// leaveCmds queues the commands that take owner out of lk's queue: its
// element, in either form (with the Locker's inbox or without), its entry,
// and its grant record.
func leaveCmds(ctx context.Context, p doer, lk, owner, inbox string) {
	wq := waitQueue(lk)
	p.Do(ctx, "lrem", wq, 0, owner)
	p.Do(ctx, "lrem", wq, 0, queueElem(owner, inbox))
	p.Do(ctx, "del", waitEntry(lk, owner), grantRecord(lk, owner))
}

// readAndJoin reads lk's PTTL and puts owner in lk's queue, in one round
// trip, under the watch of tx (an attempt's, which includes the attempt's
// tombstone):
//
//	PTTL lock; MULTI; LREM queue; SET entry PX; DEL grant; RPUSH queue; PEXPIRE queue; EXEC
//
// It returns errAborted when a watched key changed since the watch: the
// tombstone (the attempt was abandoned), or a key of the attempt's (a
// grant came in between; the caller joins again with join).
func (d *watchDriver) readAndJoin(ctx context.Context, tx *redis.Tx, lk, owner, inbox, value string, wn waitNote, notes time.Duration) (time.Duration, error) {
	var (
		pttl *redis.DurationCmd
		done *redis.Cmd
	)
	d.hook("join", lk)
	_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		pttl = p.PTTL(ctx, lk)
		p.Do(ctx, "multi")
		joinCmds(ctx, p, lk, owner, inbox, value, wn, notes)
		done = p.Do(ctx, "exec")
		return nil
	})
	if errors.Is(done.Err(), redis.Nil) {
		return 0, errAborted
	}
	if err != nil {
		return 0, err
	}
	return pttl.Val(), nil
}

// join puts owner at the end of lk's queue with a fresh entry, in two
// round trips, unless the attempt was abandoned (errAbandoned):
//
//	WATCH tombstone; EXISTS tombstone
//	MULTI; LREM queue; SET entry PX; DEL grant; RPUSH queue; PEXPIRE queue; EXEC
func (d *watchDriver) join(ctx context.Context, lk, owner, inbox, value string, wn waitNote) error {
	return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		return d.joinTx(ctx, tx, lk, owner, inbox, value, wn)
	})
}

// joinTx is join on tx, a connection with no watch armed.
func (d *watchDriver) joinTx(ctx context.Context, tx *redis.Tx, lk, owner, inbox, value string, wn waitNote) error {
	for n := 1; ; n++ {
		err := d.joinTxOnce(ctx, tx, lk, owner, inbox, value, wn)
		if !errors.Is(err, errAborted) {
			return err
		}
		// The notes hash changed (another note): nothing was applied.
		d.stats.refreshAborts.Add(1)
		if n >= d.maxAttempts {
			d.stats.gaveUp.Add(1)
			return fmt.Errorf("%w: join of %s gave up after %d aborted transactions", ErrConflict, errtext.Quote(lk), n)
		}
	}
}

// joinTxOnce is one transaction of joinTx: errAborted when a noted join
// found the notes hash changed since its read.
func (d *watchDriver) joinTxOnce(ctx context.Context, tx *redis.Tx, lk, owner, inbox, value string, wn waitNote) error {
	tomb := tombstone(lk, owner)
	watch := []string{tomb}
	if wn.note != "" {
		watch = append(watch, notesKey(lk))
	}
	var (
		void  *redis.IntCmd
		notes *redis.DurationCmd
	)
	if err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
		void = p.Exists(ctx, tomb)
		if wn.note != "" {
			notes = p.PTTL(ctx, notesKey(lk))
		}
	}); err != nil {
		return err
	}
	if void.Val() > 0 {
		unwatch(ctx, tx)
		return errAbandoned
	}
	d.hook("join", lk)
	var pttl time.Duration
	if notes != nil {
		pttl = notes.Val()
	}
	err := exec(ctx, tx, func(p redis.Pipeliner) { joinCmds(ctx, p, lk, owner, inbox, value, wn, pttl) })
	if errors.Is(err, errAborted) && wn.note != "" && !tombstoned(ctx, tx, tomb) {
		return err // the notes hash changed: joined nothing, try again
	}
	if errors.Is(err, errAborted) {
		return errAbandoned // only the tombstone is watched
	}
	return err
}

// renewal is what a heartbeat's renewal found.
type renewal struct {
	rejoined bool          // the entry had died: owner joined again, at the end
	free     bool          // the lock key does not exist (for a permit: or has room, see permitRoom)
	mine     bool          // the lock key is owner's: a release handed it over
	pttl     time.Duration // the lock key's PTTL (-1: no expiry)
}

// renew writes owner's entry in lk's queue again (value: see write, only
// if it exists) and reads the lock key and its PTTL, in one round trip, and
// joins the queue again if the entry died (two more, see join). A waiter tries for
// the key after a renewal only when it rejoined, or the key is free or its
// own: a held key's release hands it over, and its expiry is due at its
// PTTL. A permit waiter (limit > 0) also reads what permitRoom needs, and
// tries when the key's permits have room for it (or were granted with
// another limit: the attempt reports it).
//
// An exclusive waiter (exclusive) also tries when the key holds a marker
// of readers or permits: its members may all have expired unreleased
// (their holders crashed), leaving the marker until its PX, which can be
// far off; the attempt checks (membersGone) and takes the key if so.
func (d *watchDriver) renew(ctx context.Context, lk, owner, inbox, value string, limit int, exclusive bool, wn waitNote) (r renewal, err error) {
	wq, entry := waitQueue(lk), waitEntry(lk, owner)
	if wn.note != "" && d.noExpireGT.Load() {
		// No PEXPIRE ... GT: the note is kept by a watched transaction.
		if err := d.keepNote(ctx, lk, owner, wn.note, wn.life); err != nil {
			return renewal{}, err
		}
	}
	gtRefused := false
	err = d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		var (
			set  *redis.Cmd
			get  *redis.StringCmd
			pttl *redis.DurationCmd
			ps   *permitReads
			note []*redis.Cmd
		)
		cmds, _ := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			if wn.note != "" && !d.noExpireGT.Load() {
				note = renewNoteCmds(ctx, p, lk, owner, wn)
			}
			set = p.Do(ctx, "set", entry, value, "xx", "px", redisx.EntryLifeMS)
			p.PExpire(ctx, wq, 2*redisx.EntryLife)
			get = p.Get(ctx, lk)
			pttl = p.PTTL(ctx, lk)
			if limit > 0 {
				ps = readPermitRoom(ctx, p, lk, limit)
			}
			return nil
		})
		for _, c := range note {
			var reply redis.Error
			if errors.As(c.Err(), &reply) {
				gtRefused = true // before Redis 7.0: see below
			}
		}
		for _, c := range cmds[len(note):] { // a nil reply (no entry, no key) is a result
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
		}
		// PTTL: -2 for a missing key, -1 for one without expiry (go-redis
		// keeps them as durations of -2 and -1 nanoseconds).
		r = renewal{free: pttl.Val() == -2, mine: get.Err() == nil && get.Val() == owner, pttl: pttl.Val()}
		if ps != nil && get.Err() == nil && permitRoom(get.Val(), ps, limit) {
			r.free = true
		}
		if exclusive && get.Err() == nil && markerSet(lk, get.Val()) != "" {
			r.free = true
		}
		if set.Err() == nil || r.mine {
			return nil // alive (or granted: the release deleted the entry)
		}
		r.rejoined = true
		return d.joinTx(ctx, tx, lk, owner, inbox, value, wn)
	})
	if err == nil && gtRefused {
		d.noExpireGT.Store(true)
		err = d.keepNote(ctx, lk, owner, wn.note, wn.life)
	}
	return r, err
}

// tombstoned reports whether tomb exists (a read error counts as yes: the
// join is then given up as abandoned).
func tombstoned(ctx context.Context, tx *redis.Tx, tomb string) bool {
	n, err := tx.Exists(ctx, tomb).Result()
	return err != nil || n > 0
}

// renewNoteCmds queues, in a renewal's pipeline (no transaction), the
// writes that keep a waiter's note: the field, and the hash's expiry set
// where it has none (NX) or lengthened (GT), never shortened. Both options
// need Redis 7.0; a server that refuses them applies the HSET only, and
// the caller keeps the note with keepNote.
func renewNoteCmds(ctx context.Context, p redis.Pipeliner, lk, owner string, wn waitNote) []*redis.Cmd {
	n := notesKey(lk)
	return []*redis.Cmd{
		p.Do(ctx, "hset", n, owner, wn.note),
		p.Do(ctx, "pexpire", n, wn.life, "nx"),
		p.Do(ctx, "pexpire", n, wn.life, "gt"),
	}
}

// Leave implements driver.Queuer: it removes a grant whose reply was lost
// (see Release) and takes l's owner out of the queue, waking the other
// waiters if it was first in line, so that the next one takes a free key
// at once. After a join or renewal whose reply did not come, it also sets
// the attempt's tombstone, which aborts that join if it is still on its way
// (see queue.go). When a release had handed the key to l (its message missed, or
// not yet taken), it releases the key, handing it to the next waiter, and
// that release deletes l's note with the grant: the key is never held
// without its note (an election's term without its announcement). Else
// it deletes the note once out of the queue, pipelined with the wake-up:
//
//	MULTI; [SET void]; GET lock; LINDEX queue 0; LREM queue (both forms); DEL entry grant; EXEC
//	release (handed the key; then HDEL notes owner if it had expired)
//	  or [HDEL notes owner]; [PUBLISH rel ""]
//
// An entry it cannot remove dies after redisx.EntryLife.
func (d *watchDriver) Leave(ctx context.Context, l *driver.Lease) error {
	s, ok := l.Data.(*waiting)
	if !ok {
		return nil // Join never ran
	}
	s.stop()
	if s.sent { // a repeated Release finds nothing: harmless
		if err := d.Release(ctx, l); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			return err
		}
	}
	lk := d.LockKey(l.Key)
	inbox := ""
	if s.w != nil {
		inbox = s.w.Inbox()
	}
	var voidPX time.Duration
	if s.unknown {
		voidPX = max(px(l.TTL), redisx.EntryLife)
	}
	var mine bool
	err := d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		var key, first *redis.StringCmd
		err := exec(ctx, tx, func(p redis.Pipeliner) {
			if voidPX > 0 {
				p.Set(ctx, tombstone(lk, l.Owner), "", voidPX)
			}
			key = p.Get(ctx, lk)
			first = p.LIndex(ctx, waitQueue(lk), 0)
			leaveCmds(ctx, p, lk, l.Owner, inbox)
		})
		if err != nil {
			return err
		}
		if mine = key.Val() == l.Owner; mine {
			return nil // its release deletes the note with the grant
		}
		_, err = tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			if l.Note != "" {
				p.HDel(ctx, notesKey(lk), l.Owner) // written by its joins (keepNote)
			}
			if owner, _ := splitElem(first.Val()); owner == l.Owner {
				p.Do(ctx, wakeArgs(lk, "")...)
			}
			return nil
		})
		return err
	})
	if err == nil && mine {
		err = d.release(ctx, lk, l.Owner, "", 0, "", true, false, l.Note != "")
		if errors.Is(err, driver.ErrNotHeld) {
			// Expired meanwhile: its note is left, with no grant.
			err = d.dropNote(ctx, lk, l)
		}
	}
	return redisx.WithCtx(ctx, err)
}

// dropNote deletes l's note field on lk, if it has a note: a waiter's,
// written by its joins, once the waiter holds no grant and is out of the
// queue, so that no release can hand it the key any more.
func (d *watchDriver) dropNote(ctx context.Context, lk string, l *driver.Lease) error {
	if l.Note == "" {
		return nil
	}
	return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		return tx.HDel(ctx, notesKey(lk), l.Owner).Err()
	})
}
