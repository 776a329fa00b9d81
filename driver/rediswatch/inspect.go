package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

var _ driver.Inspector = (*watchDriver)(nil)

// Inspect implements driver.Inspector with plain reads, in two round trips
// on one connection:
//
//	MULTI; GET lock; PTTL lock; TIME; ZRANGE readers 0 -1 WITHSCORES;
//	       ZRANGE permits 0 -1 WITHSCORES; HGET holds t; HLEN holds;
//	       GET counter; LRANGE queue 0 1000; EXISTS notes; EXEC
//	MGET entry(OWNER1) entry(OWNER2) ...          (when waiters are queued)
//
// When the notes hash exists (the first transaction reads EXISTS notes),
// a round trip more reads the holders' notes, with the lock key and the
// members' scores to tell that the holders are those of the snapshot (see
// readNotes); when they changed, Inspect starts again, up to MaxAttempts
// times (then an error wrapping ErrConflict).
//
// The transaction only reads, so it is one snapshot of the grants
// (redisx.Grants) and of the queue; the entries, which tell the live
// waiters and their mode, are read just after it. No command is new to
// the driver's ACL rule set (MULTI and EXEC are in @transaction). The
// queue records no arrival times: waiters have no Since. redisnx's waiters
// of the same key queue apart and are not listed.
func (d *watchDriver) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	var st driver.KeyState
	if err := ctx.Err(); err != nil {
		return st, err
	}
	lk := d.LockKey(key)
	var err error
	for n := 1; ; n++ {
		if err = d.inspectOnce(ctx, lk, &st); !errors.Is(err, errMoved) {
			break
		}
		if n >= d.maxAttempts {
			err = fmt.Errorf("%w: the holders kept changing under their notes' read", ErrConflict)
			break
		}
	}
	if err != nil {
		return driver.KeyState{}, fmt.Errorf("rediswatch: inspect: %w", redisx.WithCtx(ctx, err))
	}
	return st, nil
}

// errMoved is an Inspect whose second read of the holders (readNotes)
// found them changed since the snapshot.
var errMoved = errors.New("rediswatch: inspect: the holders changed")

// inspectOnce is one attempt of Inspect on lk, which sets st.
func (d *watchDriver) inspectOnce(ctx context.Context, lk string, st *driver.KeyState) error {
	return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		var (
			get, tok, fence *redis.StringCmd
			pttl            *redis.DurationCmd
			now             *redis.TimeCmd
			readers, perms  *redis.ZSliceCmd
			hlen, notes     *redis.IntCmd
			line            *redis.StringSliceCmd
		)
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			get, pttl, now = p.Get(ctx, lk), p.PTTL(ctx, lk), p.Time(ctx)
			readers = p.ZRangeWithScores(ctx, readersKey(lk), 0, -1)
			perms = p.ZRangeWithScores(ctx, permitsKey(lk), 0, -1)
			tok, hlen = p.HGet(ctx, holdsKey(lk), "t"), p.HLen(ctx, holdsKey(lk))
			fence = p.Get(ctx, counterKey(lk))
			line = p.LRange(ctx, waitQueue(lk), 0, driver.MaxInspectWaiters)
			notes = p.Exists(ctx, notesKey(lk))
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		g := redisx.Grants{
			Value: get.Val(), Held: get.Err() == nil,
			PTTL: pttl.Val().Milliseconds(), NowMS: now.Val().UnixMilli(),
			Readers: zmembers(readers.Val()), Permits: zmembers(perms.Val()),
			HoldsTok: tok.Val(), HoldsLen: hlen.Val(), Fence: fence.Val(),
		}
		if pttl.Val() < 0 {
			g.PTTL = -1 // go-redis gives -1 and -2 as nanoseconds
		}
		*st = driver.KeyState{}
		st.Holders, st.Unknown = g.Holders()
		if notes.Val() > 0 && len(st.Holders) > 0 {
			if err := readNotes(ctx, tx, lk, g.Value, st.Holders); err != nil {
				return err
			}
		}
		elems := line.Val()
		if len(elems) > driver.MaxInspectWaiters {
			elems, st.MoreWaiters = elems[:driver.MaxInspectWaiters], true
		}
		if len(elems) == 0 {
			return nil
		}
		owners := make([]string, len(elems))
		names := make([]string, len(elems))
		for i, e := range elems {
			owners[i], _ = splitElem(e)
			names[i] = waitEntry(lk, owners[i])
		}
		entries, err := tx.MGet(ctx, names...).Result()
		if err != nil {
			return err
		}
		for i, v := range entries {
			s, ok := v.(string)
			if !ok {
				continue // nil: the entry died, and the waiter with it
			}
			w, ok := parseEntry(s)
			if !ok {
				continue
			}
			w.Owner = owners[i]
			st.Waiters = append(st.Waiters, w)
			st.Unknown.Since = true
		}
		return nil
	})
}

// readNotes sets the Note of each holder of hs (not Foreign) from the
// notes hash of lk, with HGET (the ACL rules have no HGETALL), in one
// MULTI/EXEC that also reads the lock key and each share's or permit's
// score: when the key no longer holds value (the snapshot's) or a member
// is gone, the holders changed since the snapshot, and a note read now
// may not be theirs: it returns errMoved (Inspect reads again). A
// holder's field only: others' are of grants that ended.
func readNotes(ctx context.Context, tx *redis.Tx, lk, value string, hs []driver.Holder) error {
	gets := make([]*redis.StringCmd, len(hs))
	scores := make([]*redis.FloatCmd, len(hs))
	var cur *redis.StringCmd
	_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		cur = p.Get(ctx, lk)
		for i, h := range hs {
			if h.Foreign {
				continue
			}
			gets[i] = p.HGet(ctx, notesKey(lk), h.Owner)
			switch h.Mode {
			case driver.Shared:
				scores[i] = p.ZScore(ctx, readersKey(lk), h.Owner)
			case driver.Permit:
				scores[i] = p.ZScore(ctx, permitsKey(lk), h.Owner)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if cur.Val() != value {
		return errMoved
	}
	for i, c := range gets {
		if scores[i] != nil && scores[i].Err() != nil {
			return errMoved
		}
		if c != nil {
			hs[i].Note = c.Val()
		}
	}
	return nil
}

func zmembers(zs []redis.Z) []redisx.Member {
	ms := make([]redisx.Member, 0, len(zs))
	for _, z := range zs {
		o, _ := z.Member.(string)
		ms = append(ms, redisx.Member{Owner: o, Expiry: z.Score})
	}
	return ms
}

// parseEntry reads a live waiter's entry (queue.go): "TTL N", "sTTL N" or
// "pLIMIT:TTL N", or "" (an older version's, exclusive). It reports false
// for an unreadable one.
func parseEntry(v string) (driver.Waiter, bool) {
	if v == "" {
		return driver.Waiter{Mode: driver.Exclusive}, true
	}
	mode, _, ok := strings.Cut(v, " ")
	if !ok {
		return driver.Waiter{}, false
	}
	m, limit, ok := redisx.EntryMode(mode)
	return driver.Waiter{Mode: m, Limit: limit}, ok
}
