package rediswatch

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// A blocking Lock waits in a queue kept on the server with plain commands:
//
//	P{K}:wq          list of the queued owners, the first in line at its head
//	P{K}:we:OWNER    a queued owner's entry, expiring entryLife after the
//	                 waiter last renewed it
//
// A waiter whose entry is gone is dead (its process crashed, was cut off,
// or paused past entryLife) and has lost its place.
//
// A free key with a live waiter first in line is that waiter's: every
// other attempt is refused (see acquire). A release names the first waiter
// on its Locker's inbox channel (see notify.go), and only that waiter is
// woken: it takes the key
// with an ordinary grant transaction, which also takes it out of the
// queue. So a releaser cannot take the key back ahead of those who waited,
// and a release wakes one waiter, not all of them.
//
// No transaction watches the queue, so joining, renewing and leaving never
// abort a grant or a release: what must not change under a grant is
// watched instead (the lock key, and the entry of a dead waiter whose
// place it takes).
//
// Every heartbeat a waiter renews its entry and reads the key's PTTL, in
// one round trip, and tries again only when the key is free or its entry
// had died (it then joins again, at the end). That finds a release whose
// message was lost, a release by a client that names no one (redisnx,
// redsync, redislock), and a dead waiter in first place (the key stays
// free), whose place the attempt takes. A waiter also tries when the
// holder's grant expires, at its PTTL.
const (
	entryLife   = 3 * time.Second
	entryLifeMS = int64(entryLife / time.Millisecond)
	heartbeat   = time.Second
	// leaveWait is how long a Lock call that gives up waits for its
	// leave; a slower one goes on in the background, bounded by
	// leaveTimeout, and Close waits for it.
	leaveWait    = time.Second
	leaveTimeout = 5 * time.Second
)

var _ driver.Queuer = (*watchDriver)(nil)

// AcquireWait implements driver.Queuer: a plain attempt; if the key is
// held, it joins the key's queue and tries again whenever a release names
// it (or no one), or a heartbeat or the holder's expiry comes, until it is
// granted or ctx ends. On any failure it leaves the queue, and removes a
// grant whose reply it did not get.
func (d *watchDriver) AcquireWait(ctx context.Context, l *driver.Lease) error {
	lk := d.lockKey(l.Key)
	var (
		news <-chan struct{} // nil: no notification, the heartbeat polls
		stop func()
	)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	listen := func() error {
		c, unsub, err := d.n.subscribe(ctx, channel(lk), l.Owner)
		switch {
		case err == nil:
			news, stop = c, unsub
		case ctx.Err() != nil || errors.Is(err, errNotifierClosed):
			return withCtx(ctx, err)
		}
		return nil
	}
	// Listen before the first attempt if the channel is subscribed already
	// (that costs nothing), so that a release after the attempt is heard.
	// Otherwise the first attempt goes without: the key is often free.
	early := d.n.confirmed(channel(lk))
	if early {
		if err := listen(); err != nil {
			return err
		}
	}
	var (
		how     = tryThenJoin
		renewed time.Time // when the entry was last made or renewed
		hintAt  time.Time // when the holder's grant expires, if known
		t       *time.Timer
	)
	for try := true; ; {
		if try {
			sent := time.Now()
			joined, err := d.acquire(ctx, l, how, d.n.inboxFor(l.Owner))
			if err == nil {
				l.Sent = sent // lock counts the validity from it
				return nil
			}
			var held *driver.HeldError
			if !errors.As(err, &held) {
				_, unknown := l.Data.(execSent)
				d.leave(l, unknown)
				return err
			}
			hintAt = time.Time{}
			if held.RetryAfter > 0 {
				hintAt = time.Now().Add(held.RetryAfter)
			}
			if how == tryThenJoin {
				if joined {
					renewed = sent
				} else {
					// The attempt's transaction was aborted: join now.
					at := time.Now()
					if err := d.join(ctx, lk, l.Owner, d.n.inboxFor(l.Owner)); err != nil {
						d.leave(l, false)
						return withCtx(ctx, err)
					}
					renewed = at
				}
				how = queued
				if !early {
					if err := listen(); err != nil {
						d.leave(l, false)
						return err
					}
					continue // a release may have come before the subscription
				}
			}
		}
		try = false
		if time.Since(renewed) >= heartbeat {
			at := time.Now()
			r, err := d.renew(ctx, lk, l.Owner, d.n.inboxFor(l.Owner))
			if err != nil {
				d.leave(l, false)
				return withCtx(ctx, err)
			}
			renewed = at
			if r.rejoined || r.free {
				try = true
				continue
			}
			hintAt = time.Time{}
			if r.pttl >= 0 {
				hintAt = time.Now().Add(r.pttl + time.Millisecond)
			}
		}
		wait := heartbeat - time.Since(renewed)
		if !hintAt.IsZero() {
			wait = min(wait, time.Until(hintAt))
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-news:
			try = true
		case <-t.C:
			// The holder's grant expired: try. A heartbeat's renewal
			// decides whether to.
			try = !hintAt.IsZero() && !time.Now().Before(hintAt)
		case <-ctx.Done():
			d.leave(l, false)
			return ctx.Err()
		}
	}
}

// joinCmds queues the commands that put owner at the end of lk's queue
// with a fresh entry, for a MULTI/EXEC: no one may see the owner queued
// without its entry (it would count as dead). inbox is where releases are
// to name owner ("": on the key's channel).
func joinCmds(ctx context.Context, p redis.Pipeliner, lk, owner, inbox string) {
	wq := waitQueue(lk)
	p.Do(ctx, "lrem", wq, 0, owner)
	if inbox != "" {
		p.Do(ctx, "lrem", wq, 0, queueElem(owner, inbox))
	}
	p.Do(ctx, "set", waitEntry(lk, owner), "", "px", entryLifeMS)
	p.Do(ctx, "rpush", wq, queueElem(owner, inbox))
	p.Do(ctx, "pexpire", wq, 2*entryLifeMS)
}

// leaveCmds queues the commands that take owner out of lk's queue: its
// element, in either form (with the Locker's inbox or without), and its
// entry.
func leaveCmds(ctx context.Context, p redis.Pipeliner, lk, owner, inbox string) {
	wq := waitQueue(lk)
	p.LRem(ctx, wq, 0, owner)
	p.LRem(ctx, wq, 0, queueElem(owner, inbox))
	p.Del(ctx, waitEntry(lk, owner))
}

// unwatchAndJoin releases tx's watch, reads lk's PTTL and puts owner in
// lk's queue, in one round trip:
//
//	UNWATCH; PTTL lock; MULTI; LREM queue; SET entry PX; RPUSH queue; PEXPIRE queue; EXEC
func unwatchAndJoin(ctx context.Context, tx *redis.Tx, lk, owner, inbox string) (time.Duration, error) {
	var pttl *redis.DurationCmd
	_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "unwatch")
		pttl = p.PTTL(ctx, lk)
		p.Do(ctx, "multi")
		joinCmds(ctx, p, lk, owner, inbox)
		p.Do(ctx, "exec")
		return nil
	})
	if err != nil {
		return 0, err
	}
	return pttl.Val(), nil
}

// join puts owner at the end of lk's queue with a fresh entry, in one
// round trip.
func (d *watchDriver) join(ctx context.Context, lk, owner, inbox string) error {
	return d.onConn(ctx, lk, func(tx *redis.Tx) error {
		return exec(ctx, tx, func(p redis.Pipeliner) { joinCmds(ctx, p, lk, owner, inbox) })
	})
}

// renewal is what a heartbeat's renewal found.
type renewal struct {
	rejoined bool          // the entry had died: owner joined again, at the end
	free     bool          // the lock key does not exist
	pttl     time.Duration // the lock key's PTTL (-1: no expiry)
}

// renew renews owner's entry in lk's queue and reads the lock key's PTTL,
// in one round trip, and joins the queue again if the entry died (one
// more). A waiter tries for the key after a renewal only when it rejoined
// or the key is free: a held key's release will name the first waiter,
// and its expiry is due at its PTTL.
func (d *watchDriver) renew(ctx context.Context, lk, owner, inbox string) (r renewal, err error) {
	wq, entry := waitQueue(lk), waitEntry(lk, owner)
	err = d.onConn(ctx, lk, func(tx *redis.Tx) error {
		var (
			alive *redis.BoolCmd
			pttl  *redis.DurationCmd
		)
		if _, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			alive = p.PExpire(ctx, entry, entryLife)
			p.PExpire(ctx, wq, 2*entryLife)
			pttl = p.PTTL(ctx, lk)
			return nil
		}); err != nil {
			return err
		}
		// PTTL: -2 for a missing key, -1 for one without expiry (go-redis
		// keeps them as durations of -2 and -1 nanoseconds).
		r = renewal{free: pttl.Val() == -2, pttl: pttl.Val()}
		if alive.Val() {
			return nil
		}
		r.rejoined = true
		return exec(ctx, tx, func(p redis.Pipeliner) { joinCmds(ctx, p, lk, owner, inbox) })
	})
	return r, err
}

// leave ends an AcquireWait that did not get the key: it removes a grant
// whose reply was lost (unknown, see Release) and takes l's owner out of
// the queue, waking the other waiters if it was first in line, so that the
// next one takes a free key at once. It waits at most leaveWait; an entry
// it could not remove dies after entryLife.
func (d *watchDriver) leave(l *driver.Lease, unknown bool) {
	d.bg.Add(1) // lock calls Close only after every call returned
	done := make(chan struct{})
	go func() {
		defer d.bg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		if unknown {
			_ = d.Release(ctx, l)
		}
		lk := d.lockKey(l.Key)
		_ = d.onConn(ctx, lk, func(tx *redis.Tx) error {
			var first *redis.StringCmd
			err := exec(ctx, tx, func(p redis.Pipeliner) {
				first = p.LIndex(ctx, waitQueue(lk), 0)
				leaveCmds(ctx, p, lk, l.Owner, d.n.inbox)
			})
			if owner, _ := splitElem(first.Val()); err == nil && owner == l.Owner {
				err = tx.Publish(ctx, channel(lk), "").Err()
			}
			return err
		})
	}()
	t := time.NewTimer(leaveWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
