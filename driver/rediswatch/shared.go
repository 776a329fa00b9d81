package rediswatch

import (
	"context"
	"strconv"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Shared (read) grants, in redisnx's layout, so that the readers of both
// drivers share a key: while readers hold it, the lock key holds
// redisx.Readers ("R", never an owner) with a PX at least as long as the
// longest share, so every exclusive attempt finds it held; each share is a
// member of P{K}:r, scored by when it expires (server clock, ms). A share
// expires on its own; a share that expired holds nothing, and "R" with no
// live share left is free. Shares are member grants (members.go); shares
// says how they differ from permits.
//
// Readers queue like writers (entries "sTTL N"), behind a waiting writer.
// A release never hands the key to a reader: it names the first waiter,
// which takes the key with its own attempt, and a reader's grant names the
// waiter behind it, so that readers in a row follow one another in.

// shares is the member kind of shared leases. Its transactions:
//
//	grant:   MULTI; [SET lock R PX keep]; ZREMRANGEBYSCORE readers (expired); ZADD readers expiry owner;
//	         PEXPIRE readers keep; SET counter token PX 7d; [LREM queue dead]; [leave the queue; wake the next waiter]; EXEC
//	release: UNWATCH; MULTI; ZREMRANGEBYSCORE readers (expired); ZREM readers owner; ZRANGE readers 0 0; EXEC      (other readers live)
//	         MULTI; ZREM readers owner; DEL lock readers; PUBLISH (the first waiter, or "" on the key's channel); EXEC   (the last)
//	refresh: UNWATCH; MULTI; ZADD readers XX expiry owner; PEXPIRE lock ttl GT; PEXPIRE readers ttl GT;
//	         ZSCORE readers owner; GET lock; EXEC
//
// A share is granted when no writer holds the key. The lock key and the
// readers set live at least as long as the longest share: a grant and a
// refresh only lengthen them, and a release leaves them alone (the last
// deletes them). Only the last reader's release wakes the
// first waiter (a writer, whom the others keep out); a share whose lock key
// was deleted still counts as held by its release.
var shares = &memberKind{
	set:        readersKey,
	marker:     redisx.Readers,
	marks:      func(v string) bool { return v == redisx.Readers },
	admit:      admitShare,
	claim:      claimShare,
	stretch:    stretchShare,
	hintQueued: true,
}

// admitShare grants a share unless a writer (any value but "R") holds the
// key; it joins the live readers of an "R".
func admitShare(st *memberState, owner string) (grantPlan, error) {
	_, readersLive := st.liveOther(owner)
	cur := st.get.Val()
	writer := st.get.Err() == nil && cur != redisx.Readers
	return grantPlan{held: writer, live: readersLive && cur == redisx.Readers}, nil
}

// claimShare sets the lock key to "R" for the grant's TTL unless live
// readers keep it that long already, and drops the expired shares.
func claimShare(ctx context.Context, p doer, lk, set string, g *grantPlan) {
	if !(g.live && g.pttl >= g.ttl) {
		p.Do(ctx, "set", lk, redisx.Readers, "px", g.keep)
	}
	p.Do(ctx, "zremrangebyscore", set, "-inf", "("+strconv.FormatInt(g.now, 10))
}

// stretchShare lengthens the lock key to the share's new TTL if it would
// expire sooner, and the set to the longer of the two.
func stretchShare(ctx context.Context, p redis.Pipeliner, lk, set string, st *memberState, owner string, ttl int64) {
	pttl := st.pttl.Val().Milliseconds()
	if pttl < ttl {
		p.Do(ctx, "pexpire", lk, ttl)
	}
	p.Do(ctx, "pexpire", set, max(ttl, pttl))
}
