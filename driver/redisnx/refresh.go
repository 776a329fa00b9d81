package redisnx

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// Refresh runs refresh.lua on one key: compare-and-PEXPIRE, one round trip.
func (d *redisDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	px, validity := ms(ttl)
	res, err := refreshScript.Run(ctx, d.Lanes, []string{d.LockKey(l.Key)}, px, refreshOwner(l)).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("redisnx: refresh: %w", err)
	}
	if len(res) != 1 || res[0] != 1 {
		return 0, driver.ErrNotHeld
	}
	return validity, nil
}

// Resume implements driver.Resumer with resume.lua: the key must hold
// l.Owner (128 random bits, unique to the grant), and the fencing counter
// must have reached l.Token (a larger token is refused); one round trip.
// It only ever extends the grant (see resume.lua): the Lease whose handle
// it resumes counts on the grant's expiry as it was.
// The resumed lease may have come through the queue, so its release also
// clears the queue's record of it.
func (d *redisDriver) Resume(ctx context.Context, l *driver.Lease) error {
	px, validity := ms(l.TTL)
	lk := d.LockKey(l.Key)
	n, err := resumeScript.Run(ctx, d.Lanes, []string{lk, lk + counterSuffix, lk + readersSuffix}, l.Owner, px, l.Token, modeArg(l)).Int64()
	if err != nil {
		return fmt.Errorf("redisnx: resume: %w", err)
	}
	if n != 1 && n != 2 {
		return driver.ErrNotHeld
	}
	l.Validity, l.Data = validity, viaQueue{note: n == 2}
	return nil
}

// maxScriptKeys bounds the keys of one refresh script, so that a large batch
// does not block the server for long in one script.
const maxScriptKeys = 100

// RefreshBatch refreshes ls in one pipeline holding one refresh.lua call per
// group of keys that one script may touch: all keys for a single server,
// one Cluster slot, or one Ring shard. go-redis sends a pipeline to each
// server in one round trip, to all servers at once. Only when a server does
// not know the script (NOSCRIPT) is a second round trip made, with EVAL.
func (d *redisDriver) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	px, validity := ms(ttl)
	lks := make([]string, len(ls))
	for i, l := range ls {
		lks[i] = d.LockKey(l.Key)
	}
	groups := d.Groups(lks, maxScriptKeys, true)
	cmds := make([]*redis.Cmd, len(groups))
	run := func(gs []int, eval bool) {
		err := d.Lanes.Do(ctx, func(c redis.UniversalClient) error {
			pipe := c.Pipeline()
			for _, gi := range gs {
				keys, args := refreshArgs(ls, lks, groups[gi], px)
				if eval {
					cmds[gi] = refreshScript.Eval(ctx, pipe, keys, args...)
				} else {
					cmds[gi] = refreshScript.EvalSha(ctx, pipe, keys, args...)
				}
			}
			_, _ = pipe.Exec(ctx) // errors are read per command below
			return nil
		})
		for _, gi := range gs {
			if err != nil { // no lane: nothing was sent
				cmds[gi] = redis.NewCmd(ctx)
				cmds[gi].SetErr(err)
			}
		}
	}
	all := make([]int, len(groups))
	for i := range all {
		all[i] = i
	}
	run(all, false)
	var again []int
	for gi, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, gi)
		}
	}
	if len(again) > 0 {
		run(again, true)
	}

	errs := make([]error, len(ls))
	for gi, g := range groups {
		res, err := cmds[gi].Int64Slice()
		if err == nil && len(res) != len(g) {
			err = fmt.Errorf("unexpected reply %v for %d keys", res, len(g))
		}
		for k, i := range g {
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("redisnx: refresh: %w", err)
			case res[k] != 1:
				errs[i] = driver.ErrNotHeld
			}
		}
	}
	return validity, errs
}

func refreshArgs(ls []*driver.Lease, lks []string, g []int, px int64) ([]string, []any) {
	keys := make([]string, len(g))
	args := make([]any, 1, len(g)+1)
	args[0] = px
	for k, i := range g {
		keys[k] = lks[i]
		args = append(args, refreshOwner(ls[i]))
	}
	return keys, args
}

// refreshOwner is refresh.lua's owner argument for l: "s" and the owner
// for a shared grant, "p" and the owner for a permit, "o" and the owner
// for a hold of a named owner.
func refreshOwner(l *driver.Lease) string {
	switch {
	case l.Mode == driver.Shared:
		return ownerArg("s", l)
	case l.Mode == driver.Permit:
		return ownerArg("p", l)
	case l.Reentry:
		return ownerArg("o", l)
	}
	return ownerArg("", l)
}
