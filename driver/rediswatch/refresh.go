package rediswatch

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Refresh extends l's grant to at least ttl from now, never shortening
// it: another Lease of the grant (one that resumed it, or whose handle was
// resumed) may count on a longer expiry. An exclusive grant takes two
// round trips (extendOwned), a share or a permit two (extendMember), a
// hold of a named owner two (extendHold).
func (d *watchDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	lk := d.LockKey(l.Key)
	if l.Mode != driver.Exclusive { // a share or a permit
		if err := d.extendMember(ctx, memberKindOf(l), "refresh", lk, l.Owner, ttl, 0); err != nil {
			return 0, err
		}
		return px(ttl), nil
	}
	ttl = px(ttl)
	if l.Reentrant {
		if err := d.extendHold(ctx, "refresh", lk, l.Owner, ttl, 0); err != nil {
			return 0, err
		}
		return ttl, nil
	}
	if err := d.extendOwned(ctx, "refresh", lk, l.Owner, ttl, 0); err != nil {
		return 0, err
	}
	return ttl, nil
}

// extendOwned extends the exclusive grant of owner on lk to at least ttl
// from now, never shortening it; with minToken > 0 (Resume), only if the
// fencing counter has reached it (a missing counter proves nothing and is
// let pass). In two round trips:
//
//	WATCH lock; GET lock; PTTL lock; [GET counter]
//	MULTI; PEXPIRE lock ttl; EXEC      (if GET == owner, counter >= minToken and PTTL < ttl)
//
// A key whose PTTL is at least ttl is left as it is (UNWATCH instead of
// the transaction): it lasts ttl from the read, so from the send, at
// least. One that ends sooner gets ttl from the EXEC, a later moment than
// the PTTL was read at. PEXPIRE returns 0 for a key that expired after
// the GET, on servers that do not abort the EXEC for it: driver.ErrNotHeld.
// An aborted EXEC is retried, up to d.maxAttempts transactions per call.
func (d *watchDriver) extendOwned(ctx context.Context, op, lk, owner string, ttl time.Duration, minToken uint64) error {
	return d.retryAborted(ctx, op, lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var (
				get, counter *redis.StringCmd
				pttl         *redis.DurationCmd
			)
			err := watchAndRead(ctx, tx, []string{lk}, func(p redis.Pipeliner) {
				get, pttl = p.Get(ctx, lk), p.PTTL(ctx, lk)
				if minToken > 0 {
					counter = p.Get(ctx, counterKey(lk))
				}
			})
			if err != nil {
				return err
			}
			if get.Err() != nil || get.Val() != owner {
				unwatch(ctx, tx)
				return driver.ErrNotHeld
			}
			if counter != nil {
				if c, err := counter.Uint64(); err == nil && c < minToken {
					unwatch(ctx, tx)
					return driver.ErrNotHeld
				}
			}
			if pttl.Val() >= ttl {
				unwatch(ctx, tx)
				return nil
			}
			d.hook(op, lk)
			var applied *redis.IntCmd
			if err := exec(ctx, tx, func(p redis.Pipeliner) { applied = pexpire(ctx, p, lk, ttl) }); err != nil {
				return err
			}
			if applied.Val() != 1 {
				return driver.ErrNotHeld
			}
			return nil
		})
	})
}

func pexpire(ctx context.Context, p redis.Pipeliner, lk string, ttl time.Duration) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "pexpire", lk, strconv.FormatInt(ttl.Milliseconds(), 10))
	_ = p.Process(ctx, cmd)
	return cmd
}

// maxBatchGroups is how many transactions of one RefreshBatch call run at
// once (Redis Cluster: one per slot).
const maxBatchGroups = 8

// RefreshBatch refreshes many leases in two round trips per group of keys
// that one transaction may watch: all of them on a standalone server, those
// of one slot on a Cluster (where a transaction cannot span slots, and
// every key has a slot of its own unless hash tags in the prefix say
// otherwise), each key alone on other clients.
//
//	WATCH lock1 ... lockN; MGET lock1 ... lockN; PTTL lock1; ...; PTTL lockN
//	MULTI; PEXPIRE lock_i ttl (for each lock_i that holds its owner, if its PTTL < ttl); EXEC
//
// A lease whose key does not hold its owner gets driver.ErrNotHeld. As
// Refresh, the batch never shortens a grant: a key that lasts ttl or more
// is left as it is (and when every key does, the transaction is UNWATCH
// alone). If the
// transaction is aborted (one of the keys changed, say by a concurrent
// Refresh of one lease), the group's leases are refreshed one at a time,
// each as by Refresh.
func (d *watchDriver) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	ttl = px(ttl)
	errs := make([]error, len(ls))
	lks := make([]string, len(ls))
	for i, l := range ls {
		lks[i] = d.LockKey(l.Key)
	}
	groups := d.Groups(lks, len(ls), false)
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

// refreshGroup refreshes ls[idx...] in one transaction, setting errs.
func (d *watchDriver) refreshGroup(ctx context.Context, ls []*driver.Lease, idx []int, ttl time.Duration, errs []error) {
	// Shares, permits and holds are refreshed one at a time (their
	// transactions watch the readers, the permits or the holds, not only
	// the lock key).
	excl := idx[:0:0]
	for _, i := range idx {
		if ls[i].Mode != driver.Exclusive || ls[i].Reentrant {
			_, errs[i] = d.Refresh(ctx, ls[i], ttl)
		} else {
			excl = append(excl, i)
		}
	}
	idx = excl
	if len(idx) == 0 {
		return
	}
	if len(idx) == 1 {
		_, errs[idx[0]] = d.Refresh(ctx, ls[idx[0]], ttl)
		return
	}
	keys := make([]string, len(idx))
	for j, i := range idx {
		keys[j] = d.LockKey(ls[i].Key)
	}
	var (
		owned   []int           // positions in idx of the leases whose key holds their owner
		applied []*redis.IntCmd // for each of owned, its PEXPIRE, nil where the key lasts ttl already
	)
	err := d.onConn(ctx, keys[0], func(tx *redis.Tx) error {
		owned, applied = owned[:0], applied[:0]
		var (
			mget *redis.SliceCmd
			pttl = make([]*redis.DurationCmd, len(keys))
		)
		err := watchAndRead(ctx, tx, keys, func(p redis.Pipeliner) {
			mget = p.MGet(ctx, keys...)
			for j, k := range keys {
				pttl[j] = p.PTTL(ctx, k)
			}
		})
		if err != nil {
			return err
		}
		short := 0 // owned keys that end sooner than ttl
		for j, v := range mget.Val() {
			if s, ok := v.(string); ok && s == ls[idx[j]].Owner {
				owned = append(owned, j)
				if pttl[j].Val() < ttl {
					short++
				}
			}
		}
		applied = make([]*redis.IntCmd, len(owned))
		if short == 0 {
			unwatch(ctx, tx)
			return nil
		}
		d.hook("refresh", keys[0])
		return exec(ctx, tx, func(p redis.Pipeliner) {
			for n, j := range owned {
				if pttl[j].Val() < ttl {
					applied[n] = pexpire(ctx, p, keys[j], ttl)
				}
			}
		})
	})
	switch {
	case errors.Is(err, errAborted):
		d.stats.refreshAborts.Add(1)
		d.stats.batchFallbacks.Add(1)
		isOwned := make(map[int]bool, len(owned))
		for _, j := range owned {
			isOwned[j] = true
		}
		for j, i := range idx {
			if isOwned[j] {
				_, errs[i] = d.Refresh(ctx, ls[i], ttl)
			} else {
				errs[i] = driver.ErrNotHeld
			}
		}
	case err != nil:
		for _, i := range idx {
			errs[i] = redisx.WithCtx(ctx, err)
		}
	default:
		for _, i := range idx {
			errs[i] = driver.ErrNotHeld
		}
		for n, j := range owned {
			if applied[n] == nil || applied[n].Val() == 1 {
				errs[idx[j]] = nil
			}
		}
	}
}

// Resumable implements driver.Resumer.
func (d *watchDriver) Resumable() error { return nil }

// Resume implements driver.Resumer, as a refresh that also checks the
// token: for an exclusive grant, extendOwned's two round trips with the
// counter read beside the key. The key must hold l.Owner (128 random bits,
// unique to the grant), and the fencing counter must have reached l.Token
// (a larger token is refused; a missing counter means the server lost its
// data, or a week without grants). Resume only ever extends the grant,
// whatever the mode, as Refresh does: the Lease whose handle it resumes
// counts on its expiry as it was. The resumed lease may have come through
// the queue, so its release also deletes the queue's grant record of it.
func (d *watchDriver) Resume(ctx context.Context, l *driver.Lease) error {
	lk := d.LockKey(l.Key)
	ttl := px(l.TTL)
	switch l.Mode {
	case driver.Shared:
		// A share's Resume names itself a refresh (its hook, and its
		// ErrConflict), as it always has.
		if err := d.extendMember(ctx, shares, "refresh", lk, l.Owner, ttl, l.Token); err != nil {
			return err
		}
		l.Validity, l.Data = ttl, fromQueue{}
		return nil
	case driver.Permit:
		// The lock key must hold the permits of l.Limit, and the set
		// l.Owner's live permit.
		if err := d.extendMember(ctx, permitsOf(l.Limit), "resume", lk, l.Owner, ttl, l.Token); err != nil {
			return err
		}
		l.Validity, l.Data = ttl, nil
		return nil
	}
	if l.Reentrant {
		if err := d.extendHold(ctx, "resume", lk, l.Owner, ttl, l.Token); err != nil {
			return err
		}
		l.Validity = ttl
		return nil
	}
	err := d.extendOwned(ctx, "resume", lk, l.Owner, ttl, l.Token)
	if err == nil {
		l.Validity, l.Data = ttl, fromQueue{}
	}
	return err
}
