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

var _ driver.SetAcquirer = (*watchDriver)(nil)

// AcquireSet implements driver.SetAcquirer: one transaction takes every
// key of ls or none, on one server, or on a Cluster when all the lock keys
// share a hash slot (otherwise, and over a Ring, driver.ErrNotAtomic). See
// setTx. An aborted transaction (a watched key changed) is tried again, up
// to MaxAttempts, and then reported as held. A grant's clean-up is
// Release's, per lease: the grant watches each lease's tombstone.
func (d *watchDriver) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	if err := driver.CheckSet(ls); err != nil {
		return err
	}
	lks := make([]string, len(ls))
	for i, l := range ls {
		lks[i] = d.LockKey(l.Key)
	}
	if err := redisx.OneStep(d.Client, lks); err != nil {
		return err
	}
	var toks []int64
	for n := 1; ; n++ {
		err := d.onConn(ctx, lks[0], func(ctx context.Context, tx *redis.Tx) (err error) {
			toks, err = d.setTx(ctx, tx, ls, lks)
			return err
		})
		if !errors.Is(err, errAborted) {
			if err != nil {
				return redisx.WithCtx(ctx, err)
			}
			break
		}
		d.stats.grantAborts.Add(1)
		if n >= d.maxAttempts {
			return &driver.HeldError{}
		}
	}
	for i, l := range ls {
		l.Token, l.Validity = uint64(toks[i]), px(l.TTL)
	}
	return nil
}

// setTx is one attempt at the set ls (lks: their lock keys) on tx:
//
//	WATCH lock fence void (each key); GET lock; PTTL lock; GET fence; LINDEX wq 0 (each); TIME; EXISTS void...
//	[WATCH entry (each first waiter); EXISTS entry (each)]   (only if someone is queued)
//	MULTI; SET lock owner PX ttl; SET fence token PX 7d; [LREM wq dead] (each); EXEC
//
// A key with any value (a holder, or a marker of shares or permits) is
// held, and the attempt ends with UNWATCH and a *driver.HeldError with that
// key's PTTL; a key whose first waiter is alive is refused in the same way,
// without a hint. A dead first waiter's place is taken, as Acquire takes
// it. The lock keys are watched, so the SETs need no NX: nothing wrote a
// key since it was read free, or EXEC returns nil (errAborted). Each
// tombstone is watched as Acquire's is, so an EXEC that arrives after the
// clean-up Release set it is aborted, and read, so that a transaction tried
// again after an abort does not grant what the clean-up gave up (as a
// member grant's).
func (d *watchDriver) setTx(ctx context.Context, tx *redis.Tx, ls []*driver.Lease, lks []string) ([]int64, error) {
	for _, l := range ls {
		markSent(l, false)
	}
	r, err := readSet(ctx, tx, ls, lks)
	if err != nil {
		return nil, err
	}
	if r.void {
		unwatch(ctx, tx)
		return nil, &driver.HeldError{}
	}
	for i := range lks {
		if r.holder[i].ok {
			unwatch(ctx, tx)
			return nil, heldFor(r.pttl[i])
		}
	}
	dead, err := deadHeads(ctx, tx, lks, r.head)
	if err != nil {
		return nil, err
	}
	toks := make([]int64, len(ls))
	for i, lk := range lks {
		if toks[i], err = nextToken(r.counter[i], r.now); err != nil {
			unwatch(ctx, tx)
			return nil, fmt.Errorf("%w (%s)", err, errtext.Quote(counterKey(lk)))
		}
	}
	for _, l := range ls {
		markSent(l, true)
	}
	d.hook("set", lks[0])
	return toks, exec(ctx, tx, func(p redis.Pipeliner) {
		for i, lk := range lks {
			p.Do(ctx, "set", lk, ls[i].Owner, "px", px(ls[i].TTL).Milliseconds())
			p.Do(ctx, "set", counterKey(lk), strconv.FormatInt(toks[i], 10), "px", fenceLife.Milliseconds())
			if dead[i] != "" {
				p.Do(ctx, "lrem", waitQueue(lk), 1, dead[i])
			}
		}
	})
}

// setRead is what a set's first round trip reads, one element per key.
type setRead struct {
	holder, counter []value
	pttl            []time.Duration
	head            []string // the element first in line, "" if none
	now             time.Time
	void            bool // a tombstone of the set's exists
}

// readSet watches every key's lock key, counter and the lease's tombstone,
// and reads what setRead holds, in one round trip.
func readSet(ctx context.Context, tx *redis.Tx, ls []*driver.Lease, lks []string) (setRead, error) {
	watch, tombs := make([]string, 0, 3*len(lks)), make([]string, len(lks))
	for i, lk := range lks {
		tombs[i] = tombstone(lk, ls[i].Owner)
		watch = append(watch, lk, counterKey(lk), tombs[i])
	}
	n := len(lks)
	get, counter, head := make([]*redis.StringCmd, n), make([]*redis.StringCmd, n), make([]*redis.StringCmd, n)
	pttl := make([]*redis.DurationCmd, n)
	var now *redis.TimeCmd
	var void *redis.IntCmd
	err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
		for i, lk := range lks {
			get[i], pttl[i] = p.Get(ctx, lk), p.PTTL(ctx, lk)
			counter[i], head[i] = p.Get(ctx, counterKey(lk)), p.LIndex(ctx, waitQueue(lk), 0)
		}
		now, void = p.Time(ctx), p.Exists(ctx, tombs...)
	})
	if err != nil {
		return setRead{}, err
	}
	r := setRead{holder: make([]value, n), counter: make([]value, n), pttl: make([]time.Duration, n), head: make([]string, n), now: now.Val(), void: void.Val() > 0}
	for i := range lks {
		r.holder[i], r.counter[i], r.pttl[i], r.head[i] = valueOf(get[i]), valueOf(counter[i]), pttl[i].Val(), head[i].Val()
	}
	return r, nil
}

// deadHeads judges the waiters first in line (heads, "" where none): it
// watches their entries and reads whether each exists, in one round trip
// (none when nobody is queued), and returns the elements of the dead ones
// (whose places the set takes), or a *driver.HeldError, with the watch
// released, when one is alive.
func deadHeads(ctx context.Context, tx *redis.Tx, lks, heads []string) ([]string, error) {
	var entries []string
	for i, h := range heads {
		if first, _ := splitElem(h); first != "" {
			entries = append(entries, waitEntry(lks[i], first))
		}
	}
	dead := make([]string, len(heads))
	if len(entries) == 0 {
		return dead, nil
	}
	var alive *redis.IntCmd
	if err := watchAndRead(ctx, tx, entries, func(p redis.Pipeliner) { alive = p.Exists(ctx, entries...) }); err != nil {
		return nil, err
	}
	if alive.Val() > 0 {
		unwatch(ctx, tx)
		return nil, &driver.HeldError{}
	}
	copy(dead, heads)
	return dead, nil
}
