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

// Member grants: shares (shared.go) and permits (semaphore.go). Each such
// grant is a member of a sorted set of the lock key (P{K}:r, P{K}:s),
// scored by when it expires (server clock, ms), while the lock key holds
// the kind's marker ("R", "S<N>", never an owner) with a PX that covers the
// live members, so that every grant of another kind finds the key held. A
// member expires on its own; an expired member holds nothing, and a marker
// with no live member left is free. Both kinds are granted, released,
// refreshed and resumed by the transactions below; a memberKind says what
// differs between them.

// memberKind is what tells one kind of member grant from the other in the
// transactions they share.
type memberKind struct {
	set    func(lk string) string // the members' sorted set of lock key lk
	marker string                 // the lock key's value while members are held
	// limit caps the live members (the permits of a semaphore of limit): a
	// grant also reads the limit-th latest member (memberState.nth), and a
	// live first waiter of another limit refuses it with an error (see
	// firstInLineFor). 0: no cap (shares).
	limit int
	// marks reports whether v, a lock key's value, is a marker of this kind,
	// of any limit.
	marks func(v string) bool
	// admit decides a grant of owner from what it read (held, retry and
	// live); an error refuses it, with the watch released.
	admit func(st *memberState, owner string) (grantPlan, error)
	// claim queues the writes of a grant to the lock key and the set that
	// come before its ZADD.
	claim func(ctx context.Context, p doer, lk, set string, g *grantPlan)
	// stretch queues the writes of a watched renewal (extendMemberWatched,
	// on a server without PEXPIRE's GT) to the expiry of the lock key and
	// the set, after its ZADD XX has set owner's member to expire in ttl
	// (ms).
	stretch func(ctx context.Context, p redis.Pipeliner, lk, set string, st *memberState, owner string, ttl int64)
	// hintQueued: an attempt that joins the queue because waiters are
	// queued first, though the key has room for it, hints at the lock
	// key's PTTL (else it gives no hint).
	hintQueued bool
	// A release: with needsMarker, a member counts as held only while the
	// lock key holds a marker of this kind; with wakeEach, every release
	// names the first waiter (a member returned leaves room), not only the
	// release of the last member.
	needsMarker, wakeEach bool
}

// memberKindOf is the kind of l, a share or a permit.
func memberKindOf(l *driver.Lease) *memberKind {
	if l.Mode == driver.Permit {
		return permitsOf(l.Limit)
	}
	return shares
}

// grantPlan is what a member grant decided: admit sets held, retry and
// live; the times (ms) are set for claim.
type grantPlan struct {
	held  bool          // the key is held against the grant
	retry time.Duration // held: the hint, when a live member expires and leaves room (0: the key's PTTL)
	live  bool          // live members of the kind hold the key: the grant joins them

	now  int64 // the server's clock
	ttl  int64 // the grant's TTL
	pttl int64 // the lock key's PTTL
	keep int64 // how long the lock key and the set live at least
}

// memberState is what a transaction reads of the members of lk: the lock
// key's value and PTTL, the server's clock, the two members that expire
// last, and for a grant with a limit, the limit-th latest member.
type memberState struct {
	get  *redis.StringCmd
	pttl *redis.DurationCmd
	now  *redis.TimeCmd
	top  *redis.ZSliceCmd
	nth  *redis.ZSliceCmd
}

// readMembers reads lk and the members of its sorted set set.
func readMembers(ctx context.Context, p redis.Pipeliner, lk, set string) *memberState {
	return &memberState{
		get:  p.Get(ctx, lk),
		pttl: p.PTTL(ctx, lk),
		now:  p.Time(ctx),
		top:  p.ZRangeWithScores(ctx, set, -2, -1),
	}
}

func (s *memberState) nowMS() int64 { return s.now.Val().UnixMilli() }

// liveOther returns the latest expiry among the live members of owners
// other than owner, and whether there is one.
func (s *memberState) liveOther(owner string) (int64, bool) {
	var last int64
	var ok bool
	for _, z := range s.top.Val() {
		if m, _ := z.Member.(string); m != owner && int64(z.Score) >= s.nowMS() {
			last, ok = max(last, int64(z.Score)), true
		}
	}
	return last, ok
}

// acquireMember is acquire for a share or a permit: one transaction
// (tryMember), tried again while another grant aborts it, up to
// d.maxAttempts times.
func (d *watchDriver) acquireMember(ctx context.Context, l *driver.Lease, how attempt, inbox, entry string) (joined bool, err error) {
	k := memberKindOf(l)
	for attempt := 1; ; attempt++ {
		joined, err = d.tryMember(ctx, k, l, how, inbox, entry)
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

// tryMember makes one attempt at a member grant of kind k:
//
//	WATCH lock counter tombstone; GET lock; PTTL lock; TIME; ZRANGE set -2 -1 WITHSCORES;
//	      [ZRANGE set -N -N WITHSCORES]; GET counter; LRANGE queue 0 1; EXISTS tombstone
//	MULTI; <claim>; ZADD set expiry owner; PEXPIRE set; SET counter token PX 7d;
//	       [LREM queue dead]; [leave the queue; wake the next waiter]; EXEC
//
// It is granted when k.admit finds room for it and, unless the caller is
// first in line, no live waiter is queued; the grant from the queue wakes
// the waiter behind it, so that waiters of the kind in a row follow one
// another in. The lock key is watched (a grant of another kind must not
// come in between), and so is the counter, which every grant writes: no
// other grant can come in between, so what was read holds at EXEC
// (releases and expiries only lower the count of live members). The
// tombstone is watched as by Acquire's grant.
//
// The attempt is read (readMember), planned (memberRead.step, and
// planMember once the waiter first in line is judged) and executed: see
// memberTx.
func (d *watchDriver) tryMember(ctx context.Context, k *memberKind, l *driver.Lease, how attempt, inbox, entry string) (joined bool, err error) {
	markSent(l, false)
	lk := d.LockKey(l.Key)
	q := memberReq{k: k, how: how, lk: lk, set: k.set(lk), owner: l.Owner, ttl: px(l.TTL).Milliseconds(), inbox: inbox, entry: entry, note: l.Note}
	var out grantOutcome
	err = d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		out = grantOutcome{}
		return d.memberTx(ctx, tx, l, &q, &out)
	})
	if err == nil {
		l.Token, l.Validity = uint64(out.token), time.Duration(q.ttl)*time.Millisecond
		if how == queued {
			l.Data = fromQueue{next: out.next}
		}
	}
	return out.joined, err
}

// memberReq is a member attempt's request.
type memberReq struct {
	k     *memberKind
	how   attempt
	lk    string // the lock key
	set   string // the members' set
	owner string
	ttl   int64  // the grant's TTL in ms
	inbox string // where releases are to name the caller (see queueElem)
	entry string // a tryThenJoin attempt's queue entry (see waiting.write)
	note  string // the grant's note, "" for none (see notes.go)
}

// memberTx is one member attempt on tx: its first round trip
// (readMember), the waiter first in line (firstInLineFor), and the grant
// planned on them (planMember), or the join or the refusal that takes its
// place.
func (d *watchDriver) memberTx(ctx context.Context, tx *redis.Tx, l *driver.Lease, q *memberReq, out *grantOutcome) error {
	r, err := readMember(ctx, tx, q)
	if err != nil {
		return err
	}
	step, g, err := r.step(q)
	switch {
	case err != nil:
		unwatch(ctx, tx)
		return err
	case step == memberJoin:
		return d.joinMember(ctx, tx, q, &g, r.notes, out)
	case step == memberHeld:
		return heldFor(unwatchPTTL(ctx, tx, q.lk))
	}
	dead, err := firstInLineFor(ctx, tx, q.lk, q.owner, r.head(), q.k.limit)
	if err != nil {
		return err
	}
	m, err := planMember(q, &r, g, dead)
	if err != nil {
		unwatch(ctx, tx)
		return fmt.Errorf("%w (%s)", err, errtext.Quote(counterKey(q.lk)))
	}
	out.token, out.next = m.token, m.next
	markSent(l, true)
	d.hook("grant", q.lk)
	return exec(ctx, tx, func(p redis.Pipeliner) { m.queue(ctx, p, q) })
}

// memberRead is what a member attempt reads in its first round trip.
type memberRead struct {
	st      *memberState
	counter value
	line    []string      // the first two elements of the queue
	void    bool          // the attempt's tombstone exists
	notes   time.Duration // the notes hash's PTTL (an attempt with a note only)
}

// readMember watches the lock key, the counter and the attempt's
// tombstone and reads what memberRead holds, in one round trip.
func readMember(ctx context.Context, tx *redis.Tx, q *memberReq) (memberRead, error) {
	ck, tomb := counterKey(q.lk), tombstone(q.lk, q.owner)
	var c struct {
		st      *memberState
		counter *redis.StringCmd
		line    *redis.StringSliceCmd
		void    *redis.IntCmd
		notes   *redis.DurationCmd
	}
	watch := []string{q.lk, ck, tomb}
	if q.note != "" {
		watch = append(watch, notesKey(q.lk))
	}
	err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
		if q.note != "" {
			c.notes = p.PTTL(ctx, notesKey(q.lk))
		}
		c.st = readMembers(ctx, p, q.lk, q.set)
		if q.k.limit > 0 {
			c.st.nth = p.ZRangeWithScores(ctx, q.set, -int64(q.k.limit), -int64(q.k.limit))
		}
		c.counter = p.Get(ctx, ck)
		c.line = p.LRange(ctx, waitQueue(q.lk), 0, 1)
		c.void = p.Exists(ctx, tomb)
	})
	if err != nil {
		return memberRead{}, err
	}
	r := memberRead{st: c.st, counter: valueOf(c.counter), line: c.line.Val(), void: c.void.Val() > 0}
	if c.notes != nil {
		r.notes = c.notes.Val()
	}
	return r, nil
}

// head is the element first in line, "" when no one is queued.
func (r *memberRead) head() string {
	if len(r.line) > 0 {
		return r.line[0]
	}
	return ""
}

// memberStep is what a member attempt does after its first read.
type memberStep int

const (
	memberNow  memberStep = iota // room: the grant follows, after firstInLineFor
	memberJoin                   // a tryThenJoin attempt without room, or others queued: join the queue instead (joinMember)
	memberHeld                   // no room, and no hint: refused with the lock key's PTTL
)

// step decides a member attempt's next move from its first read, and
// k.admit's plan of the grant; an error refuses the attempt (the caller
// releases the watch).
func (r *memberRead) step(q *memberReq) (memberStep, grantPlan, error) {
	if r.void {
		// The attempt's clean-up ran: a transaction retried after an
		// abort must not grant what it already gave up.
		return 0, grantPlan{}, &driver.HeldError{}
	}
	g, err := q.k.admit(r.st, q.owner)
	if err != nil {
		return 0, grantPlan{}, err
	}
	first, _ := splitElem(r.head())
	switch {
	case q.how == tryThenJoin && (g.held || first != ""):
		return memberJoin, g, nil
	case g.held && g.retry > 0:
		return 0, g, &driver.HeldError{RetryAfter: g.retry}
	case g.held:
		return memberHeld, g, nil
	}
	return memberNow, g, nil
}

// joinMember puts a tryThenJoin attempt in the queue, in the round trip
// that would have released the watch (see readAndJoin), and returns its
// refusal, with admit's hint, or the key's PTTL (none when the key has
// room but others are queued first, unless k.hintQueued).
func (d *watchDriver) joinMember(ctx context.Context, tx *redis.Tx, q *memberReq, g *grantPlan, notes time.Duration, out *grantOutcome) error {
	pttl, err := d.readAndJoin(ctx, tx, q.lk, q.owner, q.inbox, q.entry, waitNoteFor(q.note, q.ttl), notes)
	if err != nil {
		return err
	}
	out.joined = true
	switch {
	case g.retry > 0:
		return &driver.HeldError{RetryAfter: g.retry}
	case !g.held && !q.k.hintQueued:
		return &driver.HeldError{} // room, but others queued first
	}
	return heldFor(pttl)
}

// memberGrant is the plan of a member grant: what its transaction writes
// (see queue), and the token and queue element it gives the lease.
type memberGrant struct {
	g     grantPlan // admit's, with the times claim needs
	dead  string    // the element of a dead waiter first in line, whose place the grant takes
	token int64
	next  string        // the element behind the caller (see fromQueue)
	notes time.Duration // the notes hash's PTTL as read (see noteCmds)
}

// planMember plans the grant that admit allowed (g) to the attempt q that
// read r, once the waiter first in line is judged (dead: see
// firstInLineFor). It fails when the counter is not an integer (see
// nextToken).
func planMember(q *memberReq, r *memberRead, g grantPlan, dead string) (memberGrant, error) {
	token, err := nextToken(r.counter, r.st.now.Val())
	if err != nil {
		return memberGrant{}, err
	}
	g.now, g.ttl, g.pttl = r.st.nowMS(), q.ttl, r.st.pttl.Val().Milliseconds()
	g.keep = q.ttl
	if g.live {
		g.keep = max(g.keep, g.pttl)
	}
	return memberGrant{g: g, dead: dead, token: token, next: behind(r.line, q.owner, dead), notes: r.notes}, nil
}

// queue queues m's writes for the MULTI/EXEC of q.
func (m *memberGrant) queue(ctx context.Context, p doer, q *memberReq) {
	q.k.claim(ctx, p, q.lk, q.set, &m.g)
	p.Do(ctx, "zadd", q.set, float64(m.g.now+q.ttl), q.owner)
	p.Do(ctx, "pexpire", q.set, m.g.keep)
	p.Do(ctx, "set", counterKey(q.lk), strconv.FormatInt(m.token, 10), "px", fenceLife.Milliseconds())
	if m.dead != "" {
		p.Do(ctx, "lrem", waitQueue(q.lk), 1, m.dead)
	}
	if q.note != "" {
		noteCmds(ctx, p, q.lk, q.owner, q.note, m.notes, q.ttl)
	}
	if q.how == queued {
		leaveCmds(ctx, p, q.lk, q.owner, q.inbox)
		if m.next != "" {
			// A waiter behind may come in too: wake it.
			wake(ctx, p, q.lk, m.next)
		}
	}
}

// releaseMember ends owner's member grant of kind k on lk, in two round
// trips. The first watches the lock key and the set and reads them:
//
//	WATCH lock set; [SET tombstone]; GET lock; TIME; ZRANGE set -2 -1 WITHSCORES; ZSCORE set owner; LRANGE queue 0 0
//
// The second is one of three transactions. When other members are live,
// the release needs no watch, so that grants and renewals of the others,
// which write the set, do not abort it:
//
//	UNWATCH; MULTI; ZREMRANGEBYSCORE set (expired); ZREM set owner; ZRANGE set 0 0;
//	         [PUBLISH to the first waiter (or "" on the key's channel)]; EXEC
//
// It removes owner's member and the members expired at the read, whatever
// else changed since, and leaves the lock key alone: its PX covers the
// members left, as it covered them with owner's, since grants and renewals
// only lengthen it (see extendMember; the watched renewal of a server
// without PEXPIRE's GT sets it to the longest live member, which its watch
// keeps true until its EXEC). It is not shortened to the longest member
// left, which would need the set watched: an exclusive attempt sees the
// marker until the last member's release deletes it, or until the PX runs
// out when the last members expire unreleased. The transaction is atomic,
// so of concurrent releases the last one to run finds the set empty
// (ZRANGE), and only that one deletes the key, with dropMembers (two round
// trips more, only then). When owner's member is the last live one, the
// release deletes the key in the watched transaction, as the read allows:
//
//	MULTI; ZREM set owner; DEL lock set; PUBLISH to the first waiter (or "" on the key's channel); EXEC
//
// a grant or a renewal since the read aborts it, and it is tried again
// (the next read finds the new member live). When the lock key is gone or
// holds another grant, owner's member is removed and the key left alone:
//
//	UNWATCH; MULTI; ZREM set owner; EXEC
//
// No release hands the key over: the first waiter is named (it comes in
// with its own attempt, and wakes the one behind it), or, with no one
// queued, the key's channel is told, for waiters of other kinds (redisnx's,
// retry strategies). It returns driver.ErrNotHeld when owner had no live
// member at the read (see memberKind.needsMarker), or it was gone by the
// EXEC; an expired member is removed all the same.
//
// The release is read (readMemberRelease), planned (planMemberRelease) and
// executed (execMemberRelease): see releaseMemberTx.
func (d *watchDriver) releaseMember(ctx context.Context, k *memberKind, lk, owner, tomb string, tombLife time.Duration, note bool) error {
	q := memberReleaseReq{k: k, lk: lk, set: k.set(lk), owner: owner, tomb: tomb, tombLife: tombLife, note: note}
	var out memberReleased
	err := d.retryAborted(ctx, "release", lk, &d.stats.releaseAborts, func() error {
		out = memberReleased{}
		return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error { return d.releaseMemberTx(ctx, tx, &q, &out) })
	})
	if err == nil && out.emptied {
		d.dropMembers(ctx, k, lk)
	}
	if err == nil && !out.held {
		err = driver.ErrNotHeld
	}
	return err
}

// memberReleaseReq is the request of a member's release.
type memberReleaseReq struct {
	k              *memberKind
	lk, set, owner string
	tomb           string // the attempt's tombstone to set, "" for none
	tombLife       time.Duration
	note           bool // the grant has a note: delete its field (see notes.go)
}

// memberReleased is what a member's release found: whether owner held its
// member, and whether the release left the set empty (dropMembers
// follows).
type memberReleased struct{ held, emptied bool }

// releaseMemberTx is one member release transaction on tx.
func (d *watchDriver) releaseMemberTx(ctx context.Context, tx *redis.Tx, q *memberReleaseReq, out *memberReleased) error {
	r, err := readMemberRelease(ctx, tx, q)
	if err != nil {
		return err
	}
	pl := planMemberRelease(q, &r)
	if pl.action == memberNotHeld {
		unwatch(ctx, tx)
		return driver.ErrNotHeld
	}
	d.hook("release", q.lk)
	return d.execMemberRelease(ctx, tx, q, &r, &pl, out)
}

// memberReleaseRead is what a member's release reads under its watch.
type memberReleaseRead struct {
	st     memberState // the lock key, the clock and the two latest members
	score  float64     // owner's member's expiry (ms)
	scored bool        // owner has a member
	line   []string    // the first element of the queue, if any
}

// readMemberRelease watches the lock key and the set, sets the tombstone
// q asks for, and reads what memberReleaseRead holds, in one round trip.
func readMemberRelease(ctx context.Context, tx *redis.Tx, q *memberReleaseReq) (memberReleaseRead, error) {
	var c struct {
		st    memberState
		score *redis.FloatCmd
		line  *redis.StringSliceCmd
	}
	err := watchAndRead(ctx, tx, []string{q.lk, q.set}, func(p redis.Pipeliner) {
		if q.tomb != "" {
			p.Set(ctx, q.tomb, "", q.tombLife)
		}
		c.st.get, c.st.now = p.Get(ctx, q.lk), p.Time(ctx)
		c.st.top = p.ZRangeWithScores(ctx, q.set, -2, -1)
		c.score = p.ZScore(ctx, q.set, q.owner)
		c.line = p.LRange(ctx, waitQueue(q.lk), 0, 0)
	})
	if err != nil {
		return memberReleaseRead{}, err
	}
	return memberReleaseRead{st: c.st, score: c.score.Val(), scored: c.score.Err() == nil, line: c.line.Val()}, nil
}

// memberReleaseAction is what a member's release does.
type memberReleaseAction int

const (
	memberNotHeld    memberReleaseAction = iota // owner has no member: UNWATCH
	memberDeleteLast                            // the last live member of a marked key: delete the key and the set, watched
	memberRemove                                // remove owner's member, unwatched (cmds)
)

// memberReleasePlan is the plan of a member's release.
type memberReleasePlan struct {
	action memberReleaseAction
	held   bool    // owner's member was live at the read (and the key marked, if the kind needs it)
	marked bool    // the lock key holds the kind's marker
	cmds   [][]any // memberRemove: the commands for execUnwatched
}

// planMemberRelease decides the release q from what it read, r.
func planMemberRelease(q *memberReleaseReq, r *memberReleaseRead) memberReleasePlan {
	if !r.scored {
		return memberReleasePlan{action: memberNotHeld}
	}
	now := r.st.nowMS()
	pl := memberReleasePlan{marked: r.st.get.Err() == nil && q.k.marks(r.st.get.Val())}
	pl.held = (pl.marked || !q.k.needsMarker) && int64(r.score) >= now
	if _, others := r.st.liveOther(q.owner); pl.marked && !others {
		pl.action = memberDeleteLast
		return pl
	}
	pl.action = memberRemove
	pl.cmds = [][]any{{"zrem", q.set, q.owner}}
	if pl.marked {
		pl.cmds = [][]any{
			{"zremrangebyscore", q.set, "-inf", "(" + strconv.FormatInt(now, 10)},
			pl.cmds[0],
			{"zrange", q.set, 0, 0},
		}
		if q.k.wakeEach {
			pl.cmds = append(pl.cmds, wakeCmd(q.lk, r.line))
		}
	}
	if q.note {
		pl.cmds = append(pl.cmds, []any{"hdel", notesKey(q.lk), q.owner})
	}
	return pl
}

// queueLast queues the writes of a memberDeleteLast release, for its
// watched MULTI/EXEC.
func (pl *memberReleasePlan) queueLast(ctx context.Context, p doer, q *memberReleaseReq, r *memberReleaseRead) {
	p.Do(ctx, "zrem", q.set, q.owner)
	p.Do(ctx, "del", q.lk, q.set)
	p.Do(ctx, wakeCmd(q.lk, r.line)...)
	if q.note {
		p.Do(ctx, "hdel", notesKey(q.lk), q.owner)
	}
}

// outcome reads the replies to a memberRemove release's cmds: whether
// owner held its member (it was removed), and whether the set is empty.
func (pl *memberReleasePlan) outcome(replies []any) memberReleased {
	if !pl.marked {
		return memberReleased{held: pl.held && replies[0] == int64(1)}
	}
	left, _ := replies[2].([]any)
	return memberReleased{held: pl.held && replies[1] == int64(1), emptied: len(left) == 0}
}

// execMemberRelease runs the release pl on tx, and records its outcome.
func (d *watchDriver) execMemberRelease(ctx context.Context, tx *redis.Tx, q *memberReleaseReq, r *memberReleaseRead, pl *memberReleasePlan, out *memberReleased) error {
	if pl.action == memberDeleteLast {
		out.held = pl.held
		return exec(ctx, tx, func(p redis.Pipeliner) { pl.queueLast(ctx, p, q, r) })
	}
	replies, err := execUnwatched(ctx, tx, pl.cmds...)
	if err != nil {
		return err
	}
	*out = pl.outcome(replies)
	return nil
}

// wakeCmd is the PUBLISH that names the first waiter of line (LRANGE queue
// 0 0), or tells the key's channel "" when no one is queued, as arguments
// for execUnwatched.
func wakeCmd(lk string, line []string) []any {
	if len(line) == 0 {
		return wakeArgs(lk, "")
	}
	return wakeArgs(lk, line[0])
}

// dropMembers deletes the lock key lk and the set of kind k when lk holds
// the kind's marker and no member is live, after a release that left the
// set empty (see releaseMember), in two round trips:
//
//	WATCH lock set; GET lock; TIME; ZRANGE set -1 -1 WITHSCORES; LRANGE queue 0 0
//	MULTI; DEL lock set; PUBLISH to the first waiter (or "" on the key's channel); EXEC
//
// or UNWATCH when a member came in meanwhile (or the key is gone, or
// another grant's). An aborted transaction (a grant came in) is tried
// again, up to d.maxAttempts times; the release it follows is done either
// way, so a failure is not returned: the marker left with no live member
// is free for the kind's grants, and for others when its PX runs out.
func (d *watchDriver) dropMembers(ctx context.Context, k *memberKind, lk string) {
	set, wq := k.set(lk), waitQueue(lk)
	for n := 1; n <= d.maxAttempts && ctx.Err() == nil; n++ {
		err := d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
			var (
				st   memberState
				line *redis.StringSliceCmd
			)
			err := watchAndRead(ctx, tx, []string{lk, set}, func(p redis.Pipeliner) {
				st.get, st.now = p.Get(ctx, lk), p.Time(ctx)
				st.top = p.ZRangeWithScores(ctx, set, -1, -1)
				line = p.LRange(ctx, wq, 0, 0)
			})
			if err != nil {
				return err
			}
			if _, live := st.liveOther(""); live || st.get.Err() != nil || !k.marks(st.get.Val()) {
				unwatch(ctx, tx)
				return nil
			}
			d.hook("release", lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				p.Del(ctx, lk, set)
				p.Do(ctx, wakeCmd(lk, line.Val())...)
			})
		})
		if !errors.Is(err, errAborted) {
			return
		}
		d.stats.releaseAborts.Add(1)
	}
}

// extendMember extends owner's live member grant of kind k on lk, whose
// lock key must hold k.marker, to at least ttl from now, and the lock key
// and the set to expire no sooner; with minToken > 0 (Resume), only if the
// fencing counter has reached it. It never shortens owner's member (ZADD's
// GT): another Lease of the grant (one that resumed it, or whose handle
// was resumed) may count on a longer expiry. op names the operation (its
// hook, and its error when it gives up). It watches nothing, so that
// grants and releases of other members meanwhile do not abort it, in two
// round trips:
//
//	GET lock; TIME; ZSCORE set owner; [GET counter]
//	UNWATCH; MULTI; ZSCORE set owner; TIME; ZADD set XX GT expiry owner;
//	         PEXPIRE lock ttl GT; PEXPIRE set ttl GT; GET lock; EXEC
//
// (UNWATCH, for a Ring, whose client sends WATCH lock first.) Whatever
// happened since the read, the transaction tells, as it runs, whether
// owner's member was still live (its score before the ZADD, against TIME)
// and the lock key still held the marker (GET); the refresh succeeds only
// if both held, and its writes were then what a watched transaction would
// have done:
//   - ZADD XX changes owner's member only, and only while it is in the
//     set: a member removed meanwhile (by a release of the key, or by the
//     ZREMRANGEBYSCORE of a grant that found it expired) is not taken back.
//     GT leaves a member that expires later as it is.
//   - PEXPIRE ... GT only lengthens: the lock key and the set cover every
//     other live member before, and still do; no grant, refresh or release
//     shortens them (see releaseMember), so no stale read cuts them.
//
// Otherwise the refresh returns driver.ErrNotHeld. A member that had
// expired by the EXEC (a grant may have counted it out and taken its
// place) or whose lock key went to another grant was taken back by the
// ZADD: it is removed again (UNWATCH; MULTI; ZREM; ZRANGE set 0 0; EXEC, a
// round trip more; and dropMembers, if that left the set empty). Until
// then it is one member too many, which keeps grants out (no holder counts
// on it), and PEXPIRE ... GT may have lengthened the lock key, which only
// delays those waiting for it.
//
// PEXPIRE's GT needs Redis 7.0 (ZADD's, 6.2). A server that refuses either makes the driver
// fall back, for this call and every later one, to extendMemberWatched,
// which watches the lock key and the set (and is aborted by grants of other
// members).
func (d *watchDriver) extendMember(ctx context.Context, k *memberKind, op, lk, owner string, ttl time.Duration, minToken uint64, note bool) error {
	if d.noExpireGT.Load() {
		return d.extendMemberWatched(ctx, k, op, lk, owner, ttl, minToken, note)
	}
	set := k.set(lk)
	ttlMS := px(ttl).Milliseconds()
	var taken bool // owner's member was taken back, though not held
	err := d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		taken = false
		var (
			get, counter *redis.StringCmd
			now          *redis.TimeCmd
			score        *redis.FloatCmd
		)
		err := read(ctx, tx, func(p redis.Pipeliner) {
			get, now, score = p.Get(ctx, lk), p.Time(ctx), p.ZScore(ctx, set, owner)
			if minToken > 0 {
				counter = p.Get(ctx, counterKey(lk))
			}
		})
		if err != nil {
			return err
		}
		nowMS := now.Val().UnixMilli()
		if get.Err() != nil || get.Val() != k.marker || score.Err() != nil || int64(score.Val()) < nowMS {
			return driver.ErrNotHeld
		}
		if counter != nil {
			if c, err := counter.Uint64(); err == nil && c < minToken {
				return driver.ErrNotHeld
			}
		}
		d.hook(op, lk)
		const firstGT, lastGT, noteGT = 2, 4, 6 // the commands that take GT
		cmds := [][]any{
			{"zscore", set, owner},
			{"time"},
			{"zadd", set, "xx", "gt", nowMS + ttlMS, owner},
			{"pexpire", lk, ttlMS, "gt"},
			{"pexpire", set, ttlMS, "gt"},
			{"get", lk},
		}
		if note { // the grant's note lives at least as long (notes.go)
			cmds = append(cmds, []any{"pexpire", notesKey(lk), ttlMS, "gt"})
		}
		replies, err := execUnwatched(ctx, tx, cmds...)
		var ce *cmdError
		if errors.As(err, &ce) && (ce.i >= firstGT && ce.i <= lastGT || ce.i == noteGT) {
			return errNoExpireGT
		}
		if err != nil {
			return err
		}
		was, ok := replyFloat(replies[0])
		if !ok {
			return driver.ErrNotHeld // the member is gone: the ZADD did nothing
		}
		at, err := replyTime(replies[1])
		if err != nil {
			return err
		}
		if v, _ := replies[5].(string); v != k.marker || int64(was) < at.UnixMilli() {
			taken = true
			return driver.ErrNotHeld
		}
		return nil
	})
	switch {
	case errors.Is(err, errNoExpireGT):
		d.noExpireGT.Store(true)
		return d.extendMemberWatched(ctx, k, op, lk, owner, ttl, minToken, note)
	case taken:
		d.dropTaken(ctx, k, lk, owner)
	}
	return redisx.WithCtx(ctx, err)
}

// errNoExpireGT is a refusal of PEXPIRE's GT option (before Redis 7.0).
var errNoExpireGT = errors.New("rediswatch: PEXPIRE GT refused")

// dropTaken removes owner's member of kind k on lk, which holds nothing: a
// refresh took it back after it had expired, or after its lock key had gone
// to another grant. If that leaves the set empty, dropMembers deletes a
// stale marker.
func (d *watchDriver) dropTaken(ctx context.Context, k *memberKind, lk, owner string) {
	set := k.set(lk)
	var emptied bool
	err := d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		replies, err := execUnwatched(ctx, tx, []any{"zrem", set, owner}, []any{"zrange", set, 0, 0})
		if err == nil {
			left, _ := replies[1].([]any)
			emptied = len(left) == 0
		}
		return err
	})
	if err == nil && emptied {
		d.dropMembers(ctx, k, lk)
	}
}

// replyFloat reads a ZSCORE reply of execUnwatched: a double (RESP3) or a
// bulk string (RESP2); false for nil (no such member).
func replyFloat(r any) (float64, bool) {
	switch v := r.(type) {
	case float64:
		return v, true
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return 0, false
}

// replyTime reads a TIME reply of execUnwatched: seconds and microseconds.
func replyTime(r any) (time.Time, error) {
	if v, ok := r.([]any); ok && len(v) == 2 {
		s, _ := v[0].(string)
		us, _ := v[1].(string)
		sec, err1 := strconv.ParseInt(s, 10, 64)
		usec, err2 := strconv.ParseInt(us, 10, 64)
		if err1 == nil && err2 == nil {
			return time.Unix(sec, usec*1000), nil
		}
	}
	return time.Time{}, fmt.Errorf("rediswatch: TIME replied %v", r)
}

// extendMemberWatched is extendMember on a server without PEXPIRE's GT
// option (before Redis 7.0): its transaction watches the lock key and the
// set, so that the lock key's PX it sets (k.stretch: the longest of the
// live members, at least the caller's) is still right at the EXEC, and
// it is tried again when a grant or a release of another member aborts it.
// It extends owner's member to the later of its score, read under the
// watch, and ttl from now, never shortening it (as extendMember):
//
//	WATCH lock set; GET lock; PTTL lock; TIME; ZRANGE set -2 -1 WITHSCORES; ZSCORE set owner; [GET counter]
//	MULTI; ZADD set XX expiry owner; <stretch>; EXEC
func (d *watchDriver) extendMemberWatched(ctx context.Context, k *memberKind, op, lk, owner string, ttl time.Duration, minToken uint64, note bool) error {
	set := k.set(lk)
	ttlMS := px(ttl).Milliseconds()
	return d.retryAborted(ctx, op, lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
			var (
				st      *memberState
				score   *redis.FloatCmd
				counter *redis.StringCmd
				npttl   *redis.DurationCmd
			)
			watch := []string{lk, set}
			if note {
				watch = append(watch, notesKey(lk))
			}
			err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
				st = readMembers(ctx, p, lk, set)
				if note {
					npttl = p.PTTL(ctx, notesKey(lk))
				}
				score = p.ZScore(ctx, set, owner)
				if minToken > 0 {
					counter = p.Get(ctx, counterKey(lk))
				}
			})
			if err != nil {
				return err
			}
			now := st.nowMS()
			if st.get.Err() != nil || st.get.Val() != k.marker || score.Err() != nil || int64(score.Val()) < now {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			if counter != nil {
				if c, err := counter.Uint64(); err == nil && c < minToken {
					unwatch(ctx, tx)
					return driver.ErrNotHeld
				}
			}
			ttlMS := max(ttlMS, int64(score.Val())-now)
			d.hook(op, lk)
			return exec(ctx, tx, func(p redis.Pipeliner) {
				p.ZAddXX(ctx, set, redis.Z{Score: float64(now + ttlMS), Member: owner})
				k.stretch(ctx, p, lk, set, st, owner, ttlMS)
				if note {
					lengthenCmd(ctx, p, notesKey(lk), npttl.Val(), ttlMS)
				}
			})
		})
	})
}
