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
	if l.Reentry {
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
// waiting.write).
//
// A queued attempt that finds the key its own was handed the key by a
// release (whose message, if it came, only woke it): it extends the key to
// its TTL (the validity counts from this call), takes the token from the
// grant record, and leaves the queue, in the transaction. (When the record
// expired, it takes a new token.) The record is this wait's: every join
// deletes the owner's record (see joinCmds), and only a hand-over writes
// it, with the key.
//
// An exclusive attempt is read (readGrant), then planned (grantRead.step,
// and planGrant once the reads its step asks for are made), then executed
// (execGrant): see grantTx.
func (d *watchDriver) acquire(ctx context.Context, l *driver.Lease, how attempt, inbox, entry string) (joined bool, err error) {
	if l.Mode != driver.Exclusive { // a share or a permit
		return d.acquireMember(ctx, l, how, inbox, entry)
	}
	markSent(l, false)
	q := grantReq{how: how, lk: d.LockKey(l.Key), owner: l.Owner, ttl: px(l.TTL), inbox: inbox, entry: entry, note: l.Note}
	var out grantOutcome
	err = d.onConn(ctx, q.lk, func(ctx context.Context, tx *redis.Tx) error {
		out = grantOutcome{}
		return d.grantTx(ctx, tx, l, &q, &out)
	})
	if how != tryOnce && (err == nil || errors.Is(err, errAborted)) {
		markSent(l, false) // the reply came: Leave has no grant to remove
	}
	switch {
	case errors.Is(err, errAborted):
		d.stats.grantAborts.Add(1)
		return false, &driver.HeldError{}
	case err != nil:
		return out.joined, redisx.WithCtx(ctx, err)
	case !out.granted:
		return false, &driver.HeldError{}
	}
	l.Token = uint64(out.token)
	l.Validity = q.ttl
	if how == queued {
		l.Data = fromQueue{next: out.next}
	}
	return false, nil
}

// grantReq is an exclusive attempt's request.
type grantReq struct {
	how   attempt
	lk    string        // the lock key
	owner string        // the caller's owner token
	ttl   time.Duration // the grant's TTL, in whole milliseconds
	inbox string        // where releases are to name the caller (see queueElem)
	entry string        // a tryThenJoin attempt's queue entry (see waiting.write)
	note  string        // the grant's note, "" for none (see notes.go)
}

// grantOutcome is what an exclusive attempt's transaction tells acquire.
type grantOutcome struct {
	joined  bool   // it joined the queue (tryThenJoin)
	granted bool   // the EXEC granted the key
	token   int64  // the grant's fencing token
	next    string // the element behind the caller (see fromQueue)
}

// grantTx is one exclusive attempt on tx: its first round trip
// (readGrant), the reads the step planned on it asks for (a marker's
// members, membersGone; the waiter first in line, firstInLine), and the
// grant planned on all of them (planGrant, execGrant), or the join or the
// refusal that takes its place.
func (d *watchDriver) grantTx(ctx context.Context, tx *redis.Tx, l *driver.Lease, q *grantReq, out *grantOutcome) error {
	r, err := readGrant(ctx, tx, q)
	if err != nil {
		return err
	}
	var stale, dead string
	switch r.step(q) {
	case grantJoin:
		return d.joinInstead(ctx, tx, q, &r, out)
	case grantHeld:
		// The UNWATCH costs a round trip anyway: read the PTTL with it,
		// rather than on every grant.
		return heldFor(unwatchPTTL(ctx, tx, q.lk))
	case grantIfStale:
		set := markerSet(q.lk, r.holder.s)
		gone, err := membersGone(ctx, tx, q.lk, set, r.holder.s, r.now)
		if err != nil {
			return err
		}
		if !gone {
			return heldFor(unwatchPTTL(ctx, tx, q.lk))
		}
		stale = set
	}
	if !r.mine(q) {
		if dead, err = firstInLine(ctx, tx, q.lk, q.owner, r.head()); err != nil {
			return err
		}
	}
	g, err := planGrant(q, &r, stale, dead)
	if err != nil {
		unwatch(ctx, tx)
		return fmt.Errorf("%w (%s)", err, errtext.Quote(counterKey(q.lk)))
	}
	return d.execGrant(ctx, tx, l, q, &g, out)
}

// grantRead is what an exclusive attempt reads in its first round trip.
type grantRead struct {
	holder  value         // the lock key
	counter value         // the fencing counter
	now     time.Time     // the server's clock
	line    []string      // the first two elements of the queue
	record  value         // the caller's grant record (a queued attempt only)
	notes   time.Duration // the notes hash's PTTL (an attempt with a note only)
}

// readGrant watches the counter and the attempt's tombstone (a queued
// attempt's also the lock key: the queue changes only with the grant) and
// reads what grantRead holds, in one round trip.
func readGrant(ctx context.Context, tx *redis.Tx, q *grantReq) (grantRead, error) {
	ck := counterKey(q.lk)
	watch := make([]string, 2, 4)
	watch[0], watch[1] = ck, tombstone(q.lk, q.owner)
	if q.how == queued {
		watch = append(watch, q.lk)
	}
	if q.note != "" {
		watch = append(watch, notesKey(q.lk))
	}
	var c struct {
		get, counter, record *redis.StringCmd
		now                  *redis.TimeCmd
		line                 *redis.StringSliceCmd
		notes                *redis.DurationCmd
	}
	err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
		if q.note != "" {
			c.notes = p.PTTL(ctx, notesKey(q.lk))
		}
		c.get = p.Get(ctx, q.lk)
		c.counter = p.Get(ctx, ck)
		c.now = p.Time(ctx)
		c.line = p.LRange(ctx, waitQueue(q.lk), 0, 1)
		if q.how == queued {
			c.record = p.Get(ctx, grantRecord(q.lk, q.owner))
		}
	})
	if err != nil {
		return grantRead{}, err
	}
	var notes time.Duration
	if c.notes != nil {
		notes = c.notes.Val()
	}
	return grantRead{
		notes:   notes,
		holder:  valueOf(c.get),
		counter: valueOf(c.counter),
		now:     c.now.Val(),
		line:    c.line.Val(),
		record:  valueOf(c.record),
	}, nil
}

// head is the element first in line, "" when no one is queued.
func (r *grantRead) head() string {
	if len(r.line) > 0 {
		return r.line[0]
	}
	return ""
}

// mine reports whether a queued attempt found the key its own: a release
// handed it over.
func (r *grantRead) mine(q *grantReq) bool {
	return q.how == queued && r.holder.ok && r.holder.s == q.owner
}

// grantStep is what an exclusive attempt does after its first read.
type grantStep int

const (
	// grantNow: the key is free, or the caller's own; the grant follows
	// (after firstInLine, unless it is the caller's).
	grantNow grantStep = iota
	// grantJoin: a tryThenJoin attempt found the key held or others
	// queued: it joins the queue instead (joinInstead).
	grantJoin
	// grantHeld: the key is another's: the attempt is refused with its
	// PTTL.
	grantHeld
	// grantIfStale: the key holds a marker of shares or permits; the
	// grant follows if they all expired (membersGone), else as grantHeld.
	grantIfStale
)

// step decides an attempt's next move from its first read.
func (r *grantRead) step(q *grantReq) grantStep {
	first, _ := splitElem(r.head())
	switch {
	case q.how == tryThenJoin && (r.holder.ok || first != ""):
		return grantJoin
	case !r.holder.ok || r.mine(q):
		return grantNow
	case markerSet(q.lk, r.holder.s) != "":
		return grantIfStale
	}
	return grantHeld
}

// joinInstead puts a tryThenJoin attempt in the queue, in the round trip
// that would have released the watch, under that watch (see readAndJoin),
// and returns its refusal: the key's PTTL, or no hint when the key is free
// but others are queued first.
func (d *watchDriver) joinInstead(ctx context.Context, tx *redis.Tx, q *grantReq, r *grantRead, out *grantOutcome) error {
	pttl, err := d.readAndJoin(ctx, tx, q.lk, q.owner, q.inbox, q.entry, waitNoteFor(q.note, q.ttl.Milliseconds()), r.notes)
	if err != nil {
		return err
	}
	out.joined = true
	if !r.holder.ok {
		return &driver.HeldError{} // free, but others queued first
	}
	return heldFor(pttl)
}

// exclusiveGrant is the plan of an exclusive grant: what its transaction
// writes (see queue), and the token and queue element it gives the lease.
type exclusiveGrant struct {
	mine  bool   // the key is the caller's own: extend it (PEXPIRE)
	stale string // the members' set of an expired marker: delete it, and SET without NX
	dead  string // the element of a dead waiter first in line, whose place the grant takes
	token int64
	fresh bool          // token is a new one: set the counter to it (else the grant record's)
	next  string        // the element behind the caller (see fromQueue)
	notes time.Duration // the notes hash's PTTL as read (see noteCmds)
}

// planGrant plans the grant of the attempt q that read r, once the marker
// and the waiter first in line are judged: stale is the set of an expired
// marker (see membersGone), dead a dead first waiter's element (see
// firstInLine), each "" if none. The token is the grant record's when the
// key is the caller's own and the record holds one, else a new one (see
// nextToken), which fails when the counter is not an integer.
func planGrant(q *grantReq, r *grantRead, stale, dead string) (exclusiveGrant, error) {
	g := exclusiveGrant{mine: r.mine(q), stale: stale, dead: dead, fresh: true, next: behind(r.line, q.owner, dead), notes: r.notes}
	if g.mine && r.record.ok {
		if t, err := strconv.ParseInt(r.record.s, 10, 64); err == nil && t > 0 {
			g.token, g.fresh = t, false
		}
	}
	if g.fresh {
		t, err := nextToken(r.counter, r.now)
		if err != nil {
			return exclusiveGrant{}, err
		}
		g.token = t
	}
	return g, nil
}

// queue queues g's writes for the MULTI/EXEC of q, and returns the command
// whose reply tells whether the key was granted (see granted).
func (g *exclusiveGrant) queue(ctx context.Context, p doer, q *grantReq) (set *redis.Cmd) {
	ms := q.ttl.Milliseconds()
	switch {
	case g.mine:
		set = p.Do(ctx, "pexpire", q.lk, ms)
	case g.stale != "":
		// The marker of members that all expired (watched since
		// membersGone read it): the key is free.
		p.Do(ctx, "del", g.stale)
		set = p.Do(ctx, "set", q.lk, q.owner, "px", ms)
	default:
		set = p.Do(ctx, "set", q.lk, q.owner, "nx", "px", ms)
	}
	if g.fresh {
		p.Do(ctx, "set", counterKey(q.lk), strconv.FormatInt(g.token, 10), "px", fenceLife.Milliseconds())
	}
	if g.dead != "" {
		p.Do(ctx, "lrem", waitQueue(q.lk), 1, g.dead)
	}
	if q.note != "" {
		noteCmds(ctx, p, q.lk, q.owner, q.note, g.notes, ms)
	}
	if q.how == queued {
		leaveCmds(ctx, p, q.lk, q.owner, q.inbox)
	}
	return set
}

// granted reports whether the EXEC granted the key, from the reply to the
// command queue returned: a refused SET NX replies nil; a PEXPIRE of a key
// that expired after GET (on servers that do not abort the EXEC for it), 0.
func (g *exclusiveGrant) granted(set *redis.Cmd) bool {
	return set.Err() == nil && (!g.mine || set.Val() == int64(1))
}

// execGrant runs the grant g in MULTI/EXEC on tx, and records its outcome.
func (d *watchDriver) execGrant(ctx context.Context, tx *redis.Tx, l *driver.Lease, q *grantReq, g *exclusiveGrant, out *grantOutcome) error {
	markSent(l, true)
	d.hook("grant", q.lk)
	var set *redis.Cmd
	if err := exec(ctx, tx, func(p redis.Pipeliner) { set = g.queue(ctx, p, q) }); err != nil {
		return err
	}
	out.granted, out.token, out.next = g.granted(set), g.token, g.next
	return nil
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
func membersGone(ctx context.Context, tx *redis.Tx, lk, set, v string, now time.Time) (bool, error) {
	var c struct {
		cur    *redis.StringCmd
		latest *redis.ZSliceCmd
	}
	if err := watchAndRead(ctx, tx, []string{lk, set}, func(p redis.Pipeliner) {
		c.cur = p.Get(ctx, lk)
		c.latest = p.ZRangeWithScores(ctx, set, -1, -1)
	}); err != nil {
		return false, err
	}
	return markerExpired(valueOf(c.cur), v, c.latest.Val(), now), nil
}

// markerExpired reports whether the lock key, read as cur, still holds the
// marker v and the member that expires last (latest: none or one) expired
// before now.
func markerExpired(cur value, v string, latest []redis.Z, now time.Time) bool {
	if !cur.ok || cur.s != v {
		return false
	}
	nowMs := float64(now.UnixMilli())
	for _, z := range latest {
		if z.Score >= nowMs {
			return false
		}
	}
	return true
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
	alive, entry, err := watchAlive(ctx, tx, lk, waitEntry(lk, first), limit > 0)
	if err != nil {
		return "", err
	}
	if dead, err = judgeFirst(head, alive, entry, limit); err != nil {
		unwatch(ctx, tx)
	}
	return dead, err
}

// judgeFirst decides an attempt (at a permit of limit permits, or 0) on
// the waiter first in line, head, another owner's, whose entry was read
// (alive: it exists; entry: its value, for a permit attempt): a dead
// waiter's place is taken (dead is head); a live one refuses the attempt
// with a *driver.HeldError, or with limitMismatch when it waits for a
// permit of another limit.
func judgeFirst(head string, alive bool, entry string, limit int) (dead string, err error) {
	if !alive {
		return head, nil
	}
	if n, ok := entryLimit(entry); ok && limit > 0 && n != limit {
		return "", limitMismatch(n, limit)
	}
	return "", &driver.HeldError{}
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
func watchAlive(ctx context.Context, tx *redis.Tx, lk, entry string, read bool) (alive bool, val string, err error) {
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
	ctx, cancel := unwatchCtx(ctx)
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
