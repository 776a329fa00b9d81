package memcached

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
)

// maxCASAttempts bounds the gets+cas rounds of one Release or Refresh. A
// cas loses only when the item changed since the gets; it is tried again
// only if the item then still holds the caller's owner token (a concurrent
// refresh of the same lease changed it), never for another owner's grant.
const maxCASAttempts = 10

// Acquire stores the grant with add (atomic: it fails if the key exists)
// and draws the fencing token with incr. Two round trips; three or four
// when the counter is missing.
func (d *mcDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	c, ln, err := d.lanes.take(ctx)
	if err != nil {
		return err
	}
	defer d.lanes.put(ln)
	return unreachable(d.acquire(ctx, c, l))
}

// unreachable marks err as driver.ErrUnavailable when it says that no
// server can be reached: a network failure, a connection that timed out,
// no server to ask.
func unreachable(err error) error {
	if err == nil {
		return nil // errors.As would move ct to the heap on every grant
	}
	var ct *memcache.ConnectTimeoutError
	if errors.As(err, &ct) || errors.Is(err, memcache.ErrNoServers) {
		return driver.Unavailable(err)
	}
	return driver.MarkNetFailure(err)
}

func (d *mcDriver) acquire(ctx context.Context, c *memcache.Client, l *driver.Lease) error {
	secs, err := ttlSeconds(l.TTL)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	k := d.keys(l.Key)
	if l.Reentry {
		return d.acquireHold(ctx, c, l, k, secs)
	}
	err = c.Add(&memcache.Item{Key: k.lock, Value: withNote([]byte(l.Owner), l.Note), Flags: uint32(secs), Expiration: secs})
	switch {
	case errors.Is(err, memcache.ErrNotStored):
		return &driver.HeldError{}
	case err != nil:
		return fmt.Errorf("memcached add: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err // lock releases the grant by owner
	}
	token, err := nextToken(c, k.counter)
	if err != nil {
		return err
	}
	// The token orders grants only if it was drawn while the grant was
	// sure to live: then no other grant of the key overlapped the incr.
	// lock sees to that: a grant that comes back after its validity
	// (counted from start) is refreshed before it is used, and the
	// refresh's cas finds the item only if it never expired, so that no
	// other grant came between.
	l.Token, l.Validity, l.Data = token, validity(secs), k
	return nil
}

// counterLife is the fencing counter's expiration in seconds: 7 days,
// under memcached's 30-day limit for relative expirations.
const counterLife = 7 * 24 * 3600

// nextToken increments the fencing counter. A missing counter (never
// made, evicted, or lost in a restart) is created with add, seeded from
// this host's wall clock in microseconds, so that tokens keep increasing;
// if another client created it first, its incr is retried.
func nextToken(c *memcache.Client, counter string) (uint64, error) {
	for range 3 {
		n, err := c.Increment(counter, 1)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, memcache.ErrCacheMiss) {
			return 0, fmt.Errorf("memcached incr: %w", err)
		}
		seed := uint64(time.Now().UnixMicro())
		err = c.Add(&memcache.Item{Key: counter, Value: strconv.AppendUint(nil, seed, 10), Expiration: counterLife})
		if err == nil {
			return seed, nil
		}
		if !errors.Is(err, memcache.ErrNotStored) {
			return 0, fmt.Errorf("memcached add (fencing counter): %w", err)
		}
	}
	return 0, errors.New("memcached: the fencing counter vanished three times while being created")
}

// Release deletes the grant if it is the caller's: gets, compare the value
// with l.Owner, then cas with expiration -1, which memcached applies as an
// immediate expiry. Two round trips.
func (d *mcDriver) Release(ctx context.Context, l *driver.Lease) error {
	c, ln, err := d.lanes.take(ctx)
	if err != nil {
		return err
	}
	defer d.lanes.put(ln)
	if err := d.lanes.settle(ctx); err != nil {
		return err // nothing sent
	}
	if l.Reentry {
		return d.releaseHold(ctx, c, l)
	}
	return casOwned(ctx, c, "release", d.leaseKeys(l).lock, l.Owner, func(int32) int32 { return -1 })
}

// Refresh gives the caller's grant a new expiration: gets, compare, cas.
// Two round trips. It never shortens the grant, as Resume does not (see
// there): another Lease of the grant (one that resumed it, or whose handle
// was resumed) may count on a longer expiration, so it sets the larger of
// the expiration recorded in the item's flags and its own, and records it.
func (d *mcDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return 0, err
	}
	c, ln, err := d.lanes.take(ctx)
	if err != nil {
		return 0, err
	}
	defer d.lanes.put(ln)
	if l.Reentry {
		err = d.extendHold(ctx, c, "refresh", l, secs, 0)
	} else {
		err = casOwned(ctx, c, "refresh", d.leaseKeys(l).lock, l.Owner, func(recorded int32) int32 { return max(recorded, secs) })
	}
	if err != nil {
		return 0, err
	}
	return validity(secs), nil
}

// leaseKeys returns the keys of l, kept in l.Data by Acquire, or computed
// for a lease whose Acquire did not finish.
func (d *mcDriver) leaseKeys(l *driver.Lease) keys {
	if k, ok := l.Data.(keys); ok {
		return k
	}
	return d.keys(l.Key)
}

// casOwned sets the expiration of key to exptime(the expiration recorded
// in its flags) if its value is owner, atomically: the cas applies only if
// the item is unchanged since the gets that compared it. A positive
// expiration is recorded in the flags too. It returns driver.ErrNotHeld
// when the item is missing or belongs to another owner.
func casOwned(ctx context.Context, c *memcache.Client, op, key, owner string, exptime func(recorded int32) int32) error {
	return casItem(ctx, c, op, key, func(it *memcache.Item) error {
		if v, _ := splitNote(it.Value); string(v) != owner {
			return driver.ErrNotHeld
		}
		it.Expiration = exptime(recordedSecs(it.Flags))
		if it.Expiration > 0 {
			it.Flags = uint32(it.Expiration)
		}
		return nil
	})
}

// recordedSecs reads the expiration that the last grant, refresh or
// resume of an anonymous grant recorded in the item's flags: 0 when none
// did (a grant made by an earlier version of this driver), or when the
// flags hold no expiration this driver could have set.
func recordedSecs(flags uint32) int32 {
	if flags > uint32(MaxTTL/time.Second) {
		return 0
	}
	return int32(flags)
}

// casItem changes the item key by gets, change (which edits the item's
// value and expiration, or returns an error that leaves the item alone and
// is returned as it is) and cas, trying again while the cas loses to a
// change of the item, up to maxCASAttempts times. A missing item, or one
// that expired, was evicted or was deleted since the gets, gives
// driver.ErrNotHeld.
func casItem(ctx context.Context, c *memcache.Client, op, key string, change func(it *memcache.Item) error) error {
	for range maxCASAttempts {
		if err := ctx.Err(); err != nil {
			return err
		}
		it, err := c.Get(key)
		switch {
		case errors.Is(err, memcache.ErrCacheMiss):
			return driver.ErrNotHeld
		case err != nil:
			return fmt.Errorf("memcached %s: gets: %w", op, err)
		}
		if err := change(it); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err = c.CompareAndSwap(it)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrNotStored):
			return driver.ErrNotHeld // expired, evicted or deleted since the gets
		case !errors.Is(err, memcache.ErrCASConflict):
			return fmt.Errorf("memcached %s: cas: %w", op, err)
		}
		// Changed since the gets: look again.
	}
	return fmt.Errorf("memcached %s: the item changed under %d consecutive cas attempts; it was left as it was", op, maxCASAttempts)
}

// Resume implements driver.Resumer: the counter must have reached l.Token
// (a larger token is refused; a missing counter, evicted or lost, proves
// nothing and is let pass), then the item must hold l.Owner (128 random
// bits, unique to the grant): get, gets, cas; three round trips.
//
// Resume only ever extends the grant: the Lease whose handle it resumes
// counts on the item's expiration as it was. An item has one expiration,
// which memcached's get does not tell (gomemcache has no meta commands),
// so every grant, refresh and resume of an anonymous grant records the
// expiration it set, in seconds, in the item's flags, which the cas
// carries over atomically with the value: an item written with E seconds
// at t0 expires by t0+E on the server's clock, so a resume at t that sets
// the larger of E and its own TTL (and records it) never ends it sooner.
// A grant made by an earlier version of this driver records nothing
// (flags 0): its resume sets l.TTL, as those versions did. A hold of a
// named owner (mode "o") keeps its TTL in the holds instead, where its
// resume takes the larger of the hold's and its own (extendHold).
func (d *mcDriver) Resume(ctx context.Context, l *driver.Lease) error {
	secs, err := ttlSeconds(l.TTL)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c, ln, err := d.lanes.take(ctx)
	if err != nil {
		return err
	}
	defer d.lanes.put(ln)
	k := d.keys(l.Key)
	it, err := c.Get(k.counter)
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
	case err != nil:
		return fmt.Errorf("memcached resume: get counter: %w", err)
	default:
		if n, err := strconv.ParseUint(string(it.Value), 10, 64); err == nil && n < l.Token {
			return driver.ErrNotHeld
		}
	}
	if l.Reentry {
		l.Data = k
		err = d.extendHold(ctx, c, "resume", l, secs, l.Token)
	} else {
		err = casOwned(ctx, c, "resume", k.lock, l.Owner, func(recorded int32) int32 { return max(recorded, secs) })
	}
	if err != nil {
		return err
	}
	l.Validity, l.Data = validity(secs), k
	return nil
}
