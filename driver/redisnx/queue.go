package redisnx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
)

// A blocking Lock waits in a queue kept on the server (prelude.lua): the
// release hands the key to the first live waiter in the same script, so a
// releaser cannot grab the key back ahead of those who waited, and pushes
// the grant to the wait's grant list, on which the waiter's follow-up
// blocks (list.go): the next Check returns that grant with no request.
// A wait without a grant list (the Locker's blockers are taken, or the
// server's ACL refuses the lists: refused.go) is told
// on its Locker's inbox channel instead. That message only wakes the
// waiter: its Check runs wait.lua at once, which checks on the server that
// the key is its own, extends it to the TTL and returns the token the
// release recorded (one round trip; a forged or stale message gets
// nothing).
//
// Each Check renews the waiter's entry; an entry not renewed for
// redisx.EntryLife is dead (its process crashed or is cut off) and is
// skipped. The heartbeat's Check also finds a hand-over whose message was
// lost.

// waiting is a queued Lock call's state, in driver.Lease.Data until the
// key is handed to it.
type waiting struct {
	w      *redisx.Waiter
	keys   *keyNames
	f      *follow       // the follow-up on the wait's grant list, or nil
	since  time.Time     // when w was registered
	block  time.Duration // an inline step's BLPOP timeout (inline.go)
	queued bool          // wait.lua has run: l is in the queue
}

// argNote is leave.lua's ARGV[5] for a wait with a note (boxed once).
var argNote any = "n"

// errAbandoned: wait.lua found the attempt's tombstone. Only a clean-up of
// the same attempt leaves one, and lock runs Leave last; seeing it means
// the server's data is not what this attempt wrote.
var errAbandoned = errors.New("redisnx: wait: attempt abandoned")

// Join implements driver.Queuer. When the key's channel is not subscribed
// yet, it makes a plain attempt first (which needs no subscription: the key
// is often free), and queues only once its subscriptions are in force, so
// that the hand-over message is not missed. (On a busy key they are:
// wait.lua is the first attempt.)
func (d *redisDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	lk := lockKey(d.Prefix, l.Key)
	confirmed := d.Notify.Confirmed(lk)
	var hint time.Duration
	if !confirmed {
		err := d.acquire(ctx, l, lk)
		held := asHeld(err)
		if held == nil {
			return err // granted, or failed: Leave cleans up
		}
		l.Data, hint = noGrant{}, held.RetryAfter
	}
	keys := names(d.Prefix, l.Key, l.Owner)
	w, err := d.Notify.Queue(keys[0], l.Owner, wake)
	if err != nil {
		return fmt.Errorf("redisnx: wait: %w", err)
	}
	s := &waiting{w: w, keys: keys, f: newFollow(d.blockers, &d.lists, keys, l.Owner, wake), since: time.Now(), block: min(blockFor, l.TTL)}
	if hint > 0 {
		s.block = min(s.block, hint+minBlock)
	}
	if f := s.f; f != nil && d.inline {
		w.OnWake(func() { f.kick(d.Client) })
	}
	l.Data = s
	// Not confirmed at the check: the confirmation wakes the waiter, unless
	// it came before the registration (another registration of this
	// Locker's, during the attempt). Then it queues now: until it is in
	// the queue, an uncontended release publishes nothing (release.lua).
	if !confirmed && !w.Ready() {
		if hint <= 0 || hint > redisx.ConfirmWait {
			hint = redisx.ConfirmWait
		}
		return &driver.HeldError{RetryAfter: hint}
	}
	return d.wait(ctx, l, s)
}

// Check implements driver.Queuer: it runs wait.lua, unless the
// subscriptions are still being confirmed (for at most redisx.ConfirmWait:
// a hand-over message missed meanwhile is found by the next heartbeat).
func (d *redisDriver) Check(ctx context.Context, l *driver.Lease) error {
	s := l.Data.(*waiting)
	if p := s.f.take(); p != nil {
		_, ttl := ms(l.TTL)
		if v := ttl - time.Since(p.sent); v > ttl/2 {
			s.w.Stop()
			s.f.end()
			l.Token, l.Data, l.Validity = p.token, viaQueue{}, v
			return nil
		}
		// Pushed long ago: wait.lua extends it.
	}
	if !s.queued && !s.w.Ready() {
		if rest := redisx.ConfirmWait - time.Since(s.since); rest > 0 {
			return &driver.HeldError{RetryAfter: rest}
		}
	}
	return d.wait(ctx, l, s)
}

// wait runs wait.lua: it queues the waiter or renews its entry, and takes
// the key if it was handed to the waiter or is free for it.
func (d *redisDriver) wait(ctx context.Context, l *driver.Lease, s *waiting) error {
	if s.f != nil && d.lists.off.Load() { // refused.go: queue with NONCE 0
		s.f.end()
		s.f = nil
	}
	if d.inline && s.f != nil {
		return d.waitInline(ctx, l, s)
	}
	px, validity := ms(l.TTL)
	args := []any{l.Owner, px, s.w.Inbox(), redisx.EntryLifeMS, modeArg(l), nonceOf(s.f), l.Note}
	if l.Note == "" {
		args = args[:6]
	}
	res, err := waitScript.Run(ctx, d.Lanes, s.f.waitKeys(s.keys), args...).Int64Slice()
	switch {
	case err != nil:
		return fmt.Errorf("redisnx: wait: %w", redisx.WithCtx(ctx, err))
	case len(res) != 2:
		return fmt.Errorf("redisnx: wait: unexpected reply %v", res)
	}
	s.queued = true
	switch res[0] {
	case 1:
		// Granted by this request, or handed over before it and extended
		// by it: either way the TTL runs from the start of the step.
		s.w.Stop()
		s.f.end()
		l.Token, l.Data, l.Validity = uint64(res[1]), viaQueue{}, validity
		return nil
	case 0:
		return errAbandoned
	case 3:
		return limitMismatch(l, res[1])
	}
	s.f.start(d.Client)
	if pttl := time.Duration(res[1]) * time.Millisecond; pttl >= 0 {
		return &driver.HeldError{RetryAfter: pttl + time.Millisecond} // check when it expires
	}
	return &driver.HeldError{}
}

// Leave implements driver.Queuer with leave.lua: it takes the waiter out of
// the queue, passes the key on if it was handed to it meanwhile, and
// leaves the attempt's tombstone, which makes any of its wait.lua requests
// still on its way change nothing. That is not only after a reply that
// was lost: go-redis resends a request after its read timeout, and when
// the resend answers, the first copy, held in the network, is hidden from
// the driver and may land after Leave (it would queue a waiter that left).
func (d *redisDriver) Leave(ctx context.Context, l *driver.Lease) error {
	keys := names(d.Prefix, l.Key, l.Owner)
	var f *follow
	switch s := l.Data.(type) {
	case noGrant:
		return nil
	case *waiting:
		s.w.Stop()
		s.f.end()
		keys, f = s.keys, s.f
	}
	px, _ := ms(l.TTL)
	voidPX := max(px, redisx.EntryLifeMS)
	lkeys, list := f.waitKeys(keys), argPush
	if d.inline && f != nil { // no BLPOP is blocked: delete the list
		lkeys, list = f.keys[:], argDelete
	}
	args := []any{l.Owner, keys[6], voidPX, list, argNote}
	if l.Note == "" {
		args = args[:4]
	}
	if err := leaveScript.Run(ctx, d.Lanes, lkeys, args...).Err(); err != nil {
		return fmt.Errorf("redisnx: leave: %w", redisx.WithCtx(ctx, err))
	}
	return nil
}

// asHeld returns the *driver.HeldError in err's chain, or nil. (Its own
// function: errors.As moves its target to the heap, which a grant, whose
// err is nil, need not pay for.)
func asHeld(err error) *driver.HeldError {
	if err == nil {
		return nil
	}
	var held *driver.HeldError
	if errors.As(err, &held) {
		return held
	}
	return nil
}
