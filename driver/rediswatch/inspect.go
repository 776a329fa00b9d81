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
//	       GET counter; LRANGE queue 0 1000; EXEC
//	MGET entry(OWNER1) entry(OWNER2) ...          (when waiters are queued)
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
	err := d.onConn(ctx, lk, func(tx *redis.Tx) error {
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
		st = driver.KeyState{}
		st.Holders, st.Unknown = g.Holders()
		if notes.Val() > 0 {
			if err := readNotes(ctx, tx, lk, st.Holders); err != nil {
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
	if err != nil {
		return driver.KeyState{}, fmt.Errorf("rediswatch: inspect: %w", redisx.WithCtx(ctx, err))
	}
	return st, nil
}

// readNotes sets the Note of each holder of hs (not Foreign) from the
// notes hash of lk, with HGET (the ACL rules have no HGETALL), in one round
// trip. A holder's field only: others' are of grants that ended.
func readNotes(ctx context.Context, tx *redis.Tx, lk string, hs []driver.Holder) error {
	gets := make([]*redis.StringCmd, len(hs))
	_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range hs {
			if !h.Foreign {
				gets[i] = p.HGet(ctx, notesKey(lk), h.Owner)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, c := range gets {
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
