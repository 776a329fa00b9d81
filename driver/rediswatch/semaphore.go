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
// redisx.PermitsValue(N) ("S<N>", never an owner, nor "R") with a PX at
// least as long as the longest live permit's, so every exclusive or shared
// attempt (and a plain SET NX lock) finds it held; each permit is a member
// of P{K}:s, scored by when it expires (server clock, ms). A permit expires
// on its own; an expired member holds nothing, and "S<N>" with no live
// member left is free for permits (exclusive and shared attempts wait for
// its PX, or for the last release, which deletes it).
//
// Permits are shares with a cap: member grants (members.go), done by the
// same transactions as shares, with the set P{K}:s and the count of live
// members checked against the limit; permitsOf says how they differ from
// shares. Permit waiters queue like readers (entries "pLIMIT:TTL N"): a
// release never hands the key to one, it names the first waiter, which
// takes a permit with its own attempt, and each permit's grant from the
// queue names the waiter behind it, so that permit waiters in a row follow
// one another in, up to the limit.

func permitsKey(lk string) string { return lk + redisx.PermitsSuffix }

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

// permitsOf is the member kind of the permits of a semaphore of limit
// permits. Its transactions:
//
//	grant:   MULTI; [DEL permits; SET lock S<N> PX ttl | PEXPIRE lock keep]; [ZREMRANGEBYSCORE permits (expired)];
//	         ZADD permits expiry owner; PEXPIRE permits keep; SET counter token PX 7d;
//	         [LREM queue dead]; [leave the queue; wake the next waiter]; EXEC
//	release: UNWATCH; MULTI; ZREMRANGEBYSCORE permits (expired); ZREM permits owner; ZRANGE permits 0 0;
//	         PUBLISH to the first waiter (or "" on the key's channel); EXEC     (other permits live)
//	         MULTI; ZREM permits owner; DEL lock permits; PUBLISH to the first waiter (or "" on the key's channel); EXEC   (the last)
//	refresh: UNWATCH; MULTI; ZADD permits XX expiry owner; PEXPIRE lock ttl GT; PEXPIRE permits ttl GT;
//	         ZSCORE permits owner; GET lock; EXEC
//
// A permit is granted when the key is free (missing, or "S<M>" with no live
// permit: its set is deleted, with the expired permits of any limit), or
// holds "S<N>" with fewer than N live permits (the grant reads the N-th
// latest), and no live waiter is queued first. "S<M>" with live permits
// and M not N fails with an error wrapping driver.ErrInvalid, and so does a
// live first waiter for permits of another limit (the one queued waiter
// read cheaply); nothing is changed. When the permits are all taken, the
// hint is when the earliest of them expires. The lock key and the set
// expire with the longest live permit or later: a release leaves their
// PX alone (see releaseMember), and a refresh only lengthens them (see
// extendMember; on a server without PEXPIRE's GT, it sets them to the
// longest live permit, as stretchPermit says). Every
// permit returned leaves room, so every release wakes the first waiter; a
// permit counts as held only while the lock key holds "S<N>".
func permitsOf(limit int) *memberKind {
	marker := redisx.PermitsValue(limit)
	return &memberKind{
		set:    permitsKey,
		marker: marker,
		limit:  limit,
		marks: func(v string) bool {
			_, ok := lockLimit(v)
			return ok
		},
		admit: func(st *memberState, owner string) (grantPlan, error) { return admitPermit(st, owner, limit) },
		claim: func(ctx context.Context, p doer, lk, set string, g *grantPlan) {
			claimPermit(ctx, p, lk, set, marker, g)
		},
		stretch:     stretchPermit,
		needsMarker: true,
		wakeEach:    true,
	}
}

// admitPermit decides a permit of limit (see permitsOf): it joins the live
// permits of an "S<limit>" with room, or makes the semaphore anew on a free
// key.
func admitPermit(st *memberState, owner string, limit int) (grantPlan, error) {
	now := st.nowMS()
	_, live := st.liveOther(owner)
	n, isPermits := lockLimit(st.get.Val())
	isPermits = isPermits && st.get.Err() == nil
	// permits: the key is a semaphore with live permits; else it is
	// free for a permit, or held by another kind of grant.
	permits := isPermits && live
	free := st.get.Err() != nil || (isPermits && !live)
	if permits && n != limit {
		return grantPlan{}, limitMismatch(n, limit)
	}
	g := grantPlan{held: !free && !permits, live: permits}
	if permits && liveAt(st.nth.Val(), now) {
		// limit live permits: the earliest of them expires first.
		g.held = true
		g.retry = time.Duration(int64(st.nth.Val()[0].Score)-now+1) * time.Millisecond
	}
	return g, nil
}

// claimPermit makes a new semaphore of a free key (without stale members),
// or lengthens the lock key of a live one to the grant's TTL and drops its
// expired permits.
func claimPermit(ctx context.Context, p doer, lk, set, marker string, g *grantPlan) {
	switch {
	case !g.live:
		p.Do(ctx, "del", set)
		p.Do(ctx, "set", lk, marker, "px", g.keep)
	case g.pttl < g.ttl:
		p.Do(ctx, "pexpire", lk, g.keep)
	}
	if g.live {
		p.Do(ctx, "zremrangebyscore", set, "-inf", "("+strconv.FormatInt(g.now, 10))
	}
}

// stretchPermit sets the lock key and the set to expire with the longest
// live permit, never before owner's, whose TTL is now ttl.
func stretchPermit(ctx context.Context, p redis.Pipeliner, lk, set string, st *memberState, owner string, ttl int64) {
	keep := ttl
	if last, ok := st.liveOther(owner); ok {
		keep = max(keep, last-st.nowMS())
	}
	p.Do(ctx, "pexpire", lk, keep)
	p.Do(ctx, "pexpire", set, keep)
}
