package rediswatch

import (
	"context"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"
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
		if err := d.extendMember(ctx, memberKindOf(l), "refresh", lk, l.Owner, ttl, 0, noted(l)); err != nil {
			return 0, err
		}
		return px(ttl), nil
	}
	ttl = px(ttl)
	if l.Reentry {
		if err := d.extendHold(ctx, "refresh", lk, l.Owner, ttl, 0, noted(l)); err != nil {
			return 0, err
		}
		return ttl, nil
	}
	if err := d.extendOwned(ctx, "refresh", lk, l.Owner, ttl, 0, noted(l)); err != nil {
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
func (d *watchDriver) extendOwned(ctx context.Context, op, lk, owner string, ttl time.Duration, minToken uint64, note bool) error {
	return d.retryAborted(ctx, op, lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
			var (
				get, counter *redis.StringCmd
				pttl, npttl  *redis.DurationCmd
			)
			watch := []string{lk}
			if note {
				watch = append(watch, notesKey(lk))
			}
			err := watchAndRead(ctx, tx, watch, func(p redis.Pipeliner) {
				get, pttl = p.Get(ctx, lk), p.PTTL(ctx, lk)
				if note {
					npttl = p.PTTL(ctx, notesKey(lk))
				}
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
			short := note && (npttl.Val() < 0 || npttl.Val() < ttl)
			if pttl.Val() >= ttl && !short {
				unwatch(ctx, tx)
				return nil
			}
			d.hook(op, lk)
			var applied *redis.IntCmd
			if err := exec(ctx, tx, func(p redis.Pipeliner) {
				if pttl.Val() < ttl {
					applied = pexpire(ctx, p, lk, ttl)
				}
				if short {
					lengthenCmd(ctx, p, notesKey(lk), npttl.Val(), ttl.Milliseconds())
				}
			}); err != nil {
				return err
			}
			if applied != nil && applied.Val() != 1 {
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
		if err := d.extendMember(ctx, shares, "refresh", lk, l.Owner, ttl, l.Token, false); err != nil {
			return err
		}
		has, err := d.resumeNote(ctx, lk, l.Owner, false, ttl)
		l.Validity, l.Data = ttl, fromQueue{note: has}
		return err
	case driver.Permit:
		// The lock key must hold the permits of l.Limit, and the set
		// l.Owner's live permit.
		if err := d.extendMember(ctx, permitsOf(l.Limit), "resume", lk, l.Owner, ttl, l.Token, false); err != nil {
			return err
		}
		l.Validity, l.Data = ttl, nil
		return d.markNoted(ctx, l, lk, false, ttl)
	}
	if l.Reentry {
		if err := d.extendHold(ctx, "resume", lk, l.Owner, ttl, l.Token, false); err != nil {
			return err
		}
		l.Validity = ttl
		return d.markNoted(ctx, l, lk, true, ttl)
	}
	if err := d.extendOwned(ctx, "resume", lk, l.Owner, ttl, l.Token, false); err != nil {
		return err
	}
	has, err := d.resumeNote(ctx, lk, l.Owner, false, ttl)
	l.Validity, l.Data = ttl, fromQueue{note: has}
	return err
}

// markNoted records in l.Data, for a resumed permit or hold, whether its
// grant has a note (resumeNote), which its refreshes then keep.
func (d *watchDriver) markNoted(ctx context.Context, l *driver.Lease, lk string, hold bool, ttl time.Duration) error {
	has, err := d.resumeNote(ctx, lk, l.Owner, hold, ttl)
	if has {
		l.Data = notedGrant{}
	}
	return err
}
