package redisnx

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

//go:embed acquireset.lua
var acquireSetLua string

// acquireSetScript is acquireset.lua with prelude.lua's first part
// (next_token); it needs none of the queue's functions.
var acquireSetScript = redis.NewScript(suffixes.Replace(strings.Replace(acquireSetLua, "--@fence\n", fencePart(), 1)))

// fencePart is prelude.lua up to its line "--@queue".
func fencePart() string {
	fence, _, _ := strings.Cut(preludeLua, "--@queue\n")
	return fence
}

var _ driver.SetAcquirer = (*redisDriver)(nil)

// AcquireSet implements driver.SetAcquirer: acquireset.lua takes every
// key of the set or none, one round trip, on one server, or on a Cluster
// when all the lock keys share one hash slot (otherwise, and over a Ring,
// driver.ErrNotAtomic). A grant's clean-up is Release's, per lease.
func (d *redisDriver) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	if err := driver.CheckSet(ls); err != nil {
		return err
	}
	keys := make([]string, len(ls))
	args := make([]any, len(ls)+1)
	for i, l := range ls {
		keys[i], args[i] = lockKey(d.Prefix, l.Key), l.Owner
	}
	for _, l := range ls {
		l.Data = nil
	}
	if err := redisx.OneStep(d.Client, keys); err != nil {
		return err
	}
	px, validity := ms(ls[0].TTL)
	args[len(ls)] = px
	if err := ctx.Err(); err != nil {
		setData(ls, noGrant{})
		return err
	}
	res, err := acquireSetScript.Run(ctx, d.Lanes, keys, args...).Result()
	if err != nil {
		if redisx.NotSent(err) {
			setData(ls, noGrant{})
		}
		return fmt.Errorf("redisnx: grant set: %w", redisx.WithCtx(ctx, err))
	}
	return setReply(ls, res, validity)
}

// setReply reads acquireset.lua's reply into ls.
func setReply(ls []*driver.Lease, res any, validity time.Duration) error {
	if n, ok := res.(int64); ok {
		setData(ls, noGrant{})
		if n < -1 {
			return &driver.HeldError{RetryAfter: time.Duration(-n-2+1) * time.Millisecond}
		}
		return &driver.HeldError{}
	}
	toks, ok := res.([]any)
	if !ok || len(toks) != len(ls) {
		return fmt.Errorf("redisnx: grant set: unexpected reply %v", res)
	}
	for i, t := range toks {
		tok, ok := t.(int64)
		if !ok || tok <= 0 {
			return fmt.Errorf("redisnx: grant set: unexpected token %v", t)
		}
		ls[i].Token, ls[i].Validity = uint64(tok), validity
	}
	return nil
}

func setData(ls []*driver.Lease, v any) {
	for _, l := range ls {
		l.Data = v
	}
}
