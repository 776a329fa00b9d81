package rediswatch

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// maxBatchGroups is how many transactions of one RefreshBatch call run at
// once, each on its own connection.
const maxBatchGroups = 8

// maxWatchKeys bounds the keys one transaction watches. Redis's WATCH
// looks for each key in the list of those the connection watches already,
// so a transaction's WATCH costs the server time in the square of its keys:
// on Redis 7.0, 1 µs a key at 100 keys, 8 µs a key at 1000 (8 ms a call:
// 0.8 s of the server's time a second for 100,000 leases renewed each
// second).
const maxWatchKeys = 100

// RefreshBatch refreshes many leases in two round trips per group of keys
// that one transaction may watch: up to maxWatchKeys of them on a
// standalone server, of one slot on a Cluster (where a transaction cannot
// span slots, and every key has a slot of its own unless hash tags in the
// prefix say otherwise), each key alone on other clients; up to
// maxBatchGroups transactions at once. On Redis 7.0 and later:
//
//	WATCH lock1 ... lockN; MGET lock1 ... lockN
//	MULTI; PEXPIRE lock_i ttl GT (for each lock_i that holds its owner); EXEC
//
// one command per lease and four per group. GT extends a key that ends
// sooner than ttl and leaves a longer one as it is, so the batch never
// shortens a grant (as Refresh) with no PTTL read; a key that expires
// between the MGET and the EXEC aborts the EXEC (Redis 7.0 counts an
// expiry as a change of a watched key). On an older server, which refuses
// GT, the reads add a PTTL per key and only the keys that end sooner than
// ttl get a plain PEXPIRE (refreshTxPTTL).
//
// A lease whose key does not hold its owner gets driver.ErrNotHeld. An
// aborted transaction (one of its keys changed or expired: a concurrent
// Refresh of one lease, a lease about to be lost) is split, so that one
// key does not cost the others a transaction each: it is tried again
// without the keys it found not held, or, when it found all of them held,
// in two halves, down to single leases, refreshed as by Refresh (with its
// retries).
func (d *watchDriver) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	ttl = px(ttl)
	errs := make([]error, len(ls))
	lks := make([]string, len(ls))
	for i, l := range ls {
		lks[i] = d.LockKey(l.Key)
	}
	groups := d.Groups(lks, maxWatchKeys, false)
	if len(groups) == 1 {
		d.refreshGroup(ctx, ls, groups[0], ttl, errs)
		return ttl, errs
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxBatchGroups)
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d.refreshGroup(ctx, ls, g, ttl, errs)
		}()
	}
	wg.Wait()
	return ttl, errs
}

// refreshGroup refreshes ls[idx...], whose keys one transaction may watch,
// setting errs.
func (d *watchDriver) refreshGroup(ctx context.Context, ls []*driver.Lease, idx []int, ttl time.Duration, errs []error) {
	// Shares, permits and holds are refreshed one at a time (their
	// transactions watch the readers, the permits or the holds, not only
	// the lock key), and so are grants with a note (whose hash is
	// lengthened too: notes.go).
	excl := idx[:0:0]
	for _, i := range idx {
		if ls[i].Mode != driver.Exclusive || ls[i].Reentry || noted(ls[i]) {
			_, errs[i] = d.Refresh(ctx, ls[i], ttl)
		} else {
			excl = append(excl, i)
		}
	}
	d.refreshSplit(ctx, ls, excl, ttl, errs)
}

// refreshSplit refreshes the exclusive grants of ls[idx...] in one
// transaction, and splits it when it is aborted: it tries again with the
// keys it found held, if it found fewer than all, and else with each half;
// a single lease is refreshed as by Refresh. Each abort leaves fewer keys
// in each transaction, so a batch of n with k keys that change costs
// about 2k·log2(n) transactions more, not n.
func (d *watchDriver) refreshSplit(ctx context.Context, ls []*driver.Lease, idx []int, ttl time.Duration, errs []error) {
	switch len(idx) {
	case 0:
		return
	case 1:
		_, errs[idx[0]] = d.Refresh(ctx, ls[idx[0]], ttl)
		return
	}
	held, err := d.refreshTx(ctx, ls, idx, ttl, errs)
	if !errors.Is(err, errAborted) {
		return
	}
	d.stats.refreshAborts.Add(1)
	d.stats.batchFallbacks.Add(1)
	if err := ctx.Err(); err != nil {
		for _, i := range held {
			errs[i] = redisx.WithCtx(ctx, err)
		}
		return
	}
	if len(held) < len(idx) {
		d.refreshSplit(ctx, ls, held, ttl, errs)
		return
	}
	h := len(idx) / 2
	d.refreshSplit(ctx, ls, idx[:h:h], ttl, errs)
	d.refreshSplit(ctx, ls, idx[h:], ttl, errs)
}

// refreshTx runs one transaction over the exclusive grants of ls[idx...]
// (see RefreshBatch), setting errs: driver.ErrNotHeld for the leases whose
// key does not hold their owner, nil for the others once the EXEC applied.
// When the EXEC is aborted it returns errAborted with the leases found
// held, whose errs it leaves unset; on Redis before 7.0 it falls back to
// refreshTxPTTL for this call and every later one.
func (d *watchDriver) refreshTx(ctx context.Context, ls []*driver.Lease, idx []int, ttl time.Duration, errs []error) (held []int, err error) {
	if d.noExpireGT.Load() {
		return d.refreshTxPTTL(ctx, ls, idx, ttl, errs)
	}
	keys := batchKeys(d, ls, idx)
	ttlMS := strconv.FormatInt(ttl.Milliseconds(), 10)
	var applied []*redis.IntCmd // for each of held, its PEXPIRE
	err = d.onConn(ctx, keys[0], func(ctx context.Context, tx *redis.Tx) error {
		var mget *redis.SliceCmd
		err := watchAndRead(ctx, tx, keys, func(p redis.Pipeliner) { mget = p.MGet(ctx, keys...) })
		if err != nil {
			return err
		}
		held = heldOf(ls, idx, mget.Val(), held[:0])
		if len(held) == 0 {
			unwatch(ctx, tx)
			return nil
		}
		d.hook("refresh", keys[0])
		applied = make([]*redis.IntCmd, len(held))
		return exec(ctx, tx, func(p redis.Pipeliner) {
			for n, i := range held {
				applied[n] = redis.NewIntCmd(ctx, "pexpire", d.LockKey(ls[i].Key), ttlMS, "gt")
				_ = p.Process(ctx, applied[n])
			}
		})
	})
	if err != nil && gtRefused(applied) {
		d.noExpireGT.Store(true)
		return d.refreshTxPTTL(ctx, ls, idx, ttl, errs)
	}
	return held, d.setBatchErrs(ctx, idx, held, err, errs)
}

// gtRefused reports whether the server refused one of cmds, PEXPIRE ... GT
// commands of a MULTI that failed, as a server before Redis 7.0 does: a
// plain ERR reply (wrong number of arguments), not an aborted EXEC
// (go-redis's TxFailedErr) nor a refusal of its own kind (READONLY, OOM,
// MOVED, ...).
func gtRefused(cmds []*redis.IntCmd) bool {
	for _, c := range cmds {
		var reply redis.Error
		if c != nil && errors.As(c.Err(), &reply) && !errors.Is(c.Err(), redis.TxFailedErr) && strings.HasPrefix(reply.Error(), "ERR ") {
			return true
		}
	}
	return false
}

// refreshTxPTTL is refreshTx on a server without PEXPIRE's GT (before
// Redis 7.0):
//
//	WATCH lock1 ... lockN; MGET lock1 ... lockN; PTTL lock1; ...; PTTL lockN
//	MULTI; PEXPIRE lock_i ttl (for each lock_i that holds its owner, if its PTTL < ttl); EXEC
//
// When every held key lasts ttl already, the transaction is UNWATCH alone.
// PEXPIRE returns 0 for a key that expired after the MGET, on servers that
// do not abort the EXEC for it (before 6.0.9): driver.ErrNotHeld.
func (d *watchDriver) refreshTxPTTL(ctx context.Context, ls []*driver.Lease, idx []int, ttl time.Duration, errs []error) (held []int, err error) {
	keys := batchKeys(d, ls, idx)
	var applied []*redis.IntCmd // for each of held, its PEXPIRE, nil where the key lasts ttl already
	err = d.onConn(ctx, keys[0], func(ctx context.Context, tx *redis.Tx) error {
		var (
			mget *redis.SliceCmd
			pttl = make(map[int]*redis.DurationCmd, len(keys)) // by lease
		)
		err := watchAndRead(ctx, tx, keys, func(p redis.Pipeliner) {
			mget = p.MGet(ctx, keys...)
			for j, i := range idx {
				pttl[i] = p.PTTL(ctx, keys[j])
			}
		})
		if err != nil {
			return err
		}
		held = heldOf(ls, idx, mget.Val(), held[:0])
		applied = make([]*redis.IntCmd, len(held))
		short := 0 // held keys that end sooner than ttl
		for _, i := range held {
			if pttl[i].Val() < ttl {
				short++
			}
		}
		if short == 0 {
			unwatch(ctx, tx)
			return nil
		}
		d.hook("refresh", keys[0])
		return exec(ctx, tx, func(p redis.Pipeliner) {
			for n, i := range held {
				if pttl[i].Val() < ttl {
					applied[n] = pexpire(ctx, p, d.LockKey(ls[i].Key), ttl)
				}
			}
		})
	})
	if err == nil { // a PEXPIRE that found no key: not held (before 6.0.9)
		kept := held[:0]
		for n, i := range held {
			if applied[n] == nil || applied[n].Val() == 1 {
				kept = append(kept, i)
			}
		}
		held = kept
	}
	return held, d.setBatchErrs(ctx, idx, held, err, errs)
}

// batchKeys returns the lock keys of ls[idx...].
func batchKeys(d *watchDriver, ls []*driver.Lease, idx []int) []string {
	keys := make([]string, len(idx))
	for j, i := range idx {
		keys[j] = d.LockKey(ls[i].Key)
	}
	return keys
}

// heldOf appends to held the leases of ls[idx...] whose key's value, in
// vals (an MGET's reply, in idx's order), is their owner.
func heldOf(ls []*driver.Lease, idx []int, vals []any, held []int) []int {
	for j, v := range vals {
		if s, ok := v.(string); ok && j < len(idx) && s == ls[idx[j]].Owner {
			held = append(held, idx[j])
		}
	}
	return held
}

// setBatchErrs sets errs for the leases of a transaction over idx that
// ended with err and found held held: with errAborted, driver.ErrNotHeld
// for those not held, the held ones left unset (the caller tries them
// again); with another error, that error for all; else nil for the held
// ones and driver.ErrNotHeld for the others. It returns err.
func (d *watchDriver) setBatchErrs(ctx context.Context, idx, held []int, err error, errs []error) error {
	isHeld := make(map[int]bool, len(held))
	for _, i := range held {
		isHeld[i] = true
	}
	for _, i := range idx {
		switch {
		case err != nil && !errors.Is(err, errAborted):
			errs[i] = redisx.WithCtx(ctx, err)
		case !isHeld[i]:
			errs[i] = driver.ErrNotHeld
		case err == nil:
			errs[i] = nil
		}
	}
	return err
}
