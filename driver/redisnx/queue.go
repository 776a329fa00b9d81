package redisnx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// A blocking Lock waits in a queue kept on the server (prelude.lua): the
// release hands the key to the first live waiter in the same script, so a
// releaser cannot grab the key back ahead of those who waited, and tells
// that waiter alone on its Locker's inbox channel. The message only wakes
// the waiter: it runs wait.lua at once, which checks on the server that the
// key is its own (one round trip; a forged message gets nothing).
//
// Each waiter renews its entry every heartbeat; an entry not renewed for
// entryLife is dead (its process crashed or is cut off) and is skipped.
// The heartbeat also finds a hand-over whose message was lost.
const (
	entryLife   = 3 * time.Second
	entryLifeMS = int64(entryLife / time.Millisecond)
	heartbeat   = time.Second
	// leaveWait is how long a Lock call that gives up waits for its
	// leave.lua before returning; a slower one goes on in the background,
	// bounded by leaveTimeout, and Close waits for it.
	leaveWait    = time.Second
	leaveTimeout = 5 * time.Second
)

var _ driver.Queuer = (*redisDriver)(nil)

// errAbandoned: wait.lua found the attempt's tombstone. Only a clean-up of
// the same attempt leaves one, and AcquireWait runs that last; seeing it
// means the server's data is not what this attempt wrote.
var errAbandoned = errors.New("redisnx: wait: attempt abandoned")

// AcquireWait implements driver.Queuer: it joins the key's queue and
// returns when the key is handed to it, or leaves the queue when ctx ends.
func (d *redisDriver) AcquireWait(ctx context.Context, l *driver.Lease) error {
	l.Data = nil
	if err := ctx.Err(); err != nil {
		return err
	}
	keys := names(d.prefix, l.Key, l.Owner)
	ch := keys[0] + channelSuffix
	h, err := d.notify.hub(keys[0])
	if err != nil {
		return fmt.Errorf("redisnx: wait: %w", err)
	}
	if !h.confirmed(ch) {
		// Not subscribed yet: a plain attempt needs no subscription, and
		// the key is often free. Subscribe, and queue only once the
		// subscriptions are in force, so that the hand-over message is not
		// missed. (On a busy key they are: wait.lua is the first attempt.)
		err := d.acquire(ctx, l, keys)
		if err == nil {
			return nil
		}
		if !errors.Is(err, driver.ErrHeld) {
			// The outcome is unknown (unless nothing was sent): leave.lua
			// removes a grant that was applied, as lock's clean-up would.
			if _, ok := l.Data.(notSent); !ok {
				d.leave(l, keys, true)
			}
			l.Data = nil
			return err
		}
	}
	news, readyCh, readyInbox := h.addQueued(ch, l.Owner)
	defer h.removeQueued(ch, l.Owner)
	if readyCh != nil || readyInbox != nil {
		t := time.NewTimer(confirmWait)
		for _, ready := range []<-chan struct{}{readyCh, readyInbox} {
			if ready == nil {
				continue
			}
			select {
			case <-ready:
			case <-t.C:
				// Queue anyway: a hand-over message missed meanwhile is
				// found by the next heartbeat.
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-h.done:
				t.Stop()
				return errNotifierClosed
			}
		}
		t.Stop()
	}

	px, validity := ms(l.TTL)
	var t *time.Timer
	for {
		sent := time.Now()
		res, err := waitScript.Run(ctx, d.client, keys, l.Owner, px, h.inbox, entryLifeMS).Int64Slice()
		switch {
		case err != nil:
			d.leave(l, keys, true)
			if ctx.Err() != nil {
				return fmt.Errorf("redisnx: wait: %w (%w)", ctx.Err(), err)
			}
			return fmt.Errorf("redisnx: wait: %w", err)
		case len(res) != 2:
			d.leave(l, keys, true)
			return fmt.Errorf("redisnx: wait: unexpected reply %v", res)
		case res[0] == 1:
			// Granted by this request, or handed over before it and
			// extended by it: either way the TTL runs from sent.
			l.Token, l.Data = uint64(res[1]), viaQueue{}
			l.Validity, l.Sent = validity, sent
			return nil
		case res[0] == 0:
			return errAbandoned
		}
		sleep := heartbeat
		if pttl := time.Duration(res[1]) * time.Millisecond; pttl >= 0 && pttl < sleep {
			sleep = pttl + time.Millisecond // the holder's grant expires; check then
		}
		if t == nil {
			t = time.NewTimer(sleep)
			defer t.Stop()
		} else {
			t.Reset(sleep)
		}
		select {
		case <-news:
			// A hand-over to this waiter, or other news: check at once.
			// The message is not taken as a grant: anyone who may
			// PUBLISH could send it; wait.lua verifies it on the server.
		case <-t.C:
		case <-ctx.Done():
			d.leave(l, keys, false)
			return ctx.Err()
		case <-h.done:
			d.leave(l, keys, false)
			return errNotifierClosed
		}
	}
}

// leave runs leave.lua for an AcquireWait that ends without the key: it
// takes the waiter out of the queue and passes on the key if it was handed
// to it meanwhile. unknown says a request of this attempt may still be on
// its way (its reply was lost): leave.lua then leaves a tombstone that makes
// the copy change nothing. leave waits for the script at most leaveWait;
// an entry it could not remove dies after entryLife, a key handed over
// meanwhile expires with its TTL.
func (d *redisDriver) leave(l *driver.Lease, keys []string, unknown bool) {
	var voidPX int64
	if unknown {
		px, _ := ms(l.TTL)
		voidPX = max(px, entryLifeMS)
	}
	done := make(chan struct{})
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		_ = leaveScript.Run(ctx, d.client, keys, l.Owner, keys[0]+channelSuffix, voidPX).Err()
	}()
	t := time.NewTimer(leaveWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
