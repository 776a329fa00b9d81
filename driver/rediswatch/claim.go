package rediswatch

import (
	"context"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// claim takes, in one round trip and without a write, a key that a release
// handed over to the queued waiter l (see release):
//
//	MULTI; GET lock; PTTL lock; GET grant; LRANGE queue 0 1; EXEC
//
// The reads run at one instant on the server: when the lock key holds
// l.Owner, the key is l's until at least PTTL after that instant, which
// comes after this call started, so PTTL is a validity lock may count from
// the call's start. The token is the grant record's, which the release
// wrote with the key and the counter in its transaction. The release took
// l out of the queue (its element and entry) in that transaction too; the
// record is left for l's release to delete (fromQueue), or to expire. The
// key is not extended: the release set it to l's TTL (from l's entry) a
// message's delay ago.
//
// It reports false, having changed nothing, when the key is not l's, the
// record is missing (an older release) or the key has less than half of
// l's TTL left; the caller then makes the full attempt (acquire), which
// extends the key. Without a write there is nothing for a late copy of
// the request to do, so it needs no watch and no tombstone. A lease with a
// note, whose grant also lengthens the notes hash (noteCmds), is not
// claimed here.
func (d *watchDriver) claim(ctx context.Context, l *driver.Lease) (bool, error) {
	lk := d.LockKey(l.Key)
	var c struct {
		get, record *redis.StringCmd
		pttl        *redis.DurationCmd
		line        *redis.StringSliceCmd
	}
	err := d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		return exec(ctx, tx, func(p redis.Pipeliner) {
			c.get = p.Get(ctx, lk)
			c.pttl = p.PTTL(ctx, lk)
			c.record = p.Get(ctx, grantRecord(lk, l.Owner))
			c.line = p.LRange(ctx, waitQueue(lk), 0, 1)
		})
	})
	if err != nil {
		return false, err
	}
	token, validity, ok := claimed(valueOf(c.get), c.pttl.Val(), valueOf(c.record), l.Owner, px(l.TTL))
	if !ok {
		return false, nil
	}
	l.Token, l.Validity = uint64(token), validity
	l.Data = fromQueue{next: behind(c.line.Val(), l.Owner, "")}
	d.stats.claims.Add(1)
	return true, nil
}

// claimed decides a claim from what it read: the lock key (holder) and its
// PTTL, and the owner's grant record. It grants owner, asking for ttl, the
// record's token with validity PTTL (at most ttl), when the key holds owner
// with at least half of ttl left and the record holds a token.
func claimed(holder value, pttl time.Duration, record value, owner string, ttl time.Duration) (token int64, validity time.Duration, ok bool) {
	if !holder.ok || holder.s != owner || !record.ok || pttl < ttl/2 || pttl <= 0 {
		return 0, 0, false
	}
	t, err := strconv.ParseInt(record.s, 10, 64)
	if err != nil || t <= 0 {
		return 0, 0, false
	}
	return t, min(pttl, ttl), true
}
