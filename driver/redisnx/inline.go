package redisnx

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// An inline step: over lanes (driver.Caps.ReturnsAtContextEnd), a step of a wait with a
// grant list is one pipeline on one connection, on the caller's
// goroutine: LLEN of the list, wait.lua, and a BLPOP of the list that
// blocks for at most the step's timeout. wait.lua pushes "x" to the list
// when it ends the wait (a grant, an abandoned attempt, a refused permit)
// and the list is empty, so that the BLPOP returns at once; while the
// waiter waits, the release that hands it the key pushes "NONCE TOKEN"
// there, and the BLPOP's reply is the grant. As for a follow-up (list.go),
// only a grant that BLPOP took from a list that LLEN found empty counts:
// it was pushed after the pipeline was sent, so its TTL runs from after
// that moment, which is after the step started, from when lock counts its
// validity. Anything else only makes the next step start at once.
//
// The BLPOP's timeout is the holder's PTTL as the step before saw it (the
// key may expire, and no release pushes then), at most a Heartbeat, and
// at most the waiter's TTL before its first reply. A Locker's first step,
// and its first after a NOSCRIPT reply (the pipeline's EVALSHA cannot
// fall back as Script.Run does), sends wait.lua whole (EVAL), which
// caches it on the server. A step that the caller's context ends closes its lane's connection (redisx.Lanes),
// which unblocks the BLPOP on the server; Leave then deletes the list.

// A wake-up on the Locker's channels (a release that published and handed
// nothing over, such as rediswatch's on a key both drivers use, or the
// subscriptions confirmed again) would not end a blocked step: the
// waiter's redisx.Waiter calls kick, which pushes "x" to the list while a
// step is under way (an "x" only ends the step; one left over makes the
// next step return at once, and expires with the list).

// kick ends f's inline step under way, if any (see above).
func (f *follow) kick(c redis.UniversalClient) {
	if !f.blocking.Load() || f.kicking.Swap(true) {
		return
	}
	go func() {
		defer f.kicking.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), blockFor)
		defer cancel()
		c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.RPush(ctx, f.keys[6], "x")
			p.PExpire(ctx, f.keys[6], listLife)
			return nil
		})
	}()
}

// listLife is prelude.lua's LIST_LIFE_MS.
const listLife = 3 * time.Second

// minBlock is the shortest BLPOP timeout (0 would block for ever).
const minBlock = time.Millisecond

// waitInline runs one inline step of s's wait.
func (d *redisDriver) waitInline(ctx context.Context, l *driver.Lease, s *waiting) error {
	px, validity := ms(l.TTL)
	f := s.f
	var n *redis.IntCmd
	var r, v *redis.Cmd
	sent := time.Now()
	f.blocking.Store(true)
	err := d.Lanes.Do(ctx, func(c redis.UniversalClient) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			n = p.LLen(ctx, f.keys[6])
			eval := waitScript.EvalSha
			if !d.waitLoaded.Load() {
				eval = waitScript.Eval // which caches it on the server
			}
			if l.Note == "" {
				r = eval(ctx, p, f.keys[:], l.Owner, px, s.w.Inbox(), redisx.EntryLifeMS, modeArg(l), f.nonce)
			} else {
				r = eval(ctx, p, f.keys[:], l.Owner, px, s.w.Inbox(), redisx.EntryLifeMS, modeArg(l), f.nonce, l.Note)
			}
			v = p.Do(ctx, "blpop", f.keys[6], blockArg(s.block))
			return nil
		})
		return err
	})
	f.blocking.Store(false)
	if n != nil && d.lists.refused(n.Err(), v.Err()) {
		return d.wait(ctx, l, s) // again at once, without the list (refused.go)
	}
	if err != nil && err != redis.Nil {
		if r != nil && isNoScript(r.Err()) { // the server lost its scripts
			d.waitLoaded.Store(false)
			f.signal()
			return &driver.HeldError{}
		}
		return fmt.Errorf("redisnx: wait: %w", redisx.WithCtx(ctx, err))
	}
	d.waitLoaded.Store(true)
	res, err := r.Int64Slice()
	if err != nil || len(res) != 2 {
		return fmt.Errorf("redisnx: wait: unexpected reply %v (%v)", res, err)
	}
	s.queued = true
	switch res[0] {
	case 1:
		s.w.Stop()
		f.end()
		l.Token, l.Data, l.Validity = uint64(res[1]), viaQueue{}, validity
		return nil
	case 0:
		return errAbandoned
	case 3:
		return limitMismatch(l, res[1])
	}
	s.block = blockFor
	if pttl := time.Duration(res[1]) * time.Millisecond; pttl >= 0 {
		s.block = min(pttl+minBlock, blockFor)
	}
	if tok, ok := f.pushedGrant(n, v); ok && time.Since(sent) < validity/2 {
		s.w.Stop()
		f.end()
		l.Token, l.Data, l.Validity = tok, viaQueue{}, validity
		return nil
	}
	// A timeout, a stale or foreign value, or a grant whose reply came
	// late (the next step's wait.lua extends it): step again at once.
	f.signal()
	return &driver.HeldError{}
}

// pushedGrant returns the grant the BLPOP v took, when LLEN n found the
// list empty before it.
func (f *follow) pushedGrant(n *redis.IntCmd, v *redis.Cmd) (uint64, bool) {
	if n.Err() != nil || n.Val() != 0 {
		return 0, false
	}
	kv, err := v.StringSlice()
	if err != nil || len(kv) != 2 {
		return 0, false
	}
	return f.parse(kv[1])
}

// blockArg is BLPOP's timeout argument for d, in seconds (go-redis's
// BLPop sends whole seconds).
func blockArg(d time.Duration) string {
	return strconv.FormatFloat(max(d, minBlock).Seconds(), 'f', 3, 64)
}

// leave.lua's ARGV[4]: what it does with the grant list it is given.
var argPush, argDelete any = "x", "d"
