package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// Negative controls: the seeds' lock algorithms that are known to be
// broken, written as drivers over raw clients and wrapped with lock.New,
// so that they run through the very scenarios and checkers the real
// drivers do (this package's tests, and internal/nemesis). Like the seeds,
// they hand out no fencing token (0), so a fenced resource cannot refuse
// their stale writes.

// A Control is one broken algorithm.
type Control struct {
	Name    string
	Backend Backend
	// TTL is the lease TTL the scenarios use with it.
	TTL time.Duration
	// Gaps are the checkpoints inside the algorithm ("acquire-gap",
	// "release-gap"): its non-atomic steps, where Hooks.Checkpoint is
	// called.
	Gaps []string
	// Open makes a Locker with its own client to addrs (the Locker owns
	// it), with options o.
	Open func(ctx context.Context, addrs []string, o lock.Options, h Hooks) (*lock.Locker, error)
}

// Hooks let a test reach into a control's algorithm.
type Hooks struct {
	// Checkpoint, if set, is called at each of the control's Gaps.
	Checkpoint func(point string)
}

// At calls Checkpoint, if set.
func (h Hooks) At(point string) {
	if h.Checkpoint != nil {
		h.Checkpoint(point)
	}
}

// Controls are the seeds' broken algorithms.
var Controls = []*Control{
	// SETNX key owner; DEL key (after comparing: see ownerDel). No expiry
	// at all: a holder that dies leaves the key forever.
	{Name: "setnx-del", Backend: RedisBackend, TTL: time.Second,
		Open: openRedisControl(func(b ctlBase) driver.Driver { return &setnxDel{b} })},
	// SETNX, then PEXPIRE in a second command: killed in between, a key
	// without expiry. (Its release checks the owner: see ownerDel.)
	{Name: "setnx-then-expire", Backend: RedisBackend, TTL: time.Second, Gaps: []string{"acquire-gap"},
		Open: openRedisControl(func(b ctlBase) driver.Driver { return &setnxThenExpire{b} })},
	// SET NX PX, but an unconditional DEL and PEXPIRE: a holder that
	// wakes past its TTL deletes (or extends) the next holder's lock.
	{Name: "setnx-ex-del", Backend: RedisBackend, TTL: time.Second,
		Open: openRedisControl(func(b ctlBase) driver.Driver { return &setnxExDel{b} })},
	// GET, compare, then DEL: the key can change hands in between.
	{Name: "get-compare-del", Backend: RedisBackend, TTL: time.Second, Gaps: []string{"release-gap"},
		Open: openRedisControl(func(b ctlBase) driver.Driver { return &getCompareDel{b} })},
	// The SETNX+GETSET timestamp lock of Redis's old documentation.
	{Name: "getset-timestamp", Backend: RedisBackend, TTL: time.Second, Gaps: []string{"release-gap"},
		Open: openRedisControl(func(b ctlBase) driver.Driver {
			return &getsetTimestamp{ctlBase: b, stamps: map[string]int64{}}
		})},
	// memcached add with a TTL, but a plain delete and touch.
	{Name: "memcached-add-delete", Backend: MemcachedBackend, TTL: 2 * time.Second, Open: openMemcachedControl},
}

// ControlByName returns the control named name, or nil.
func ControlByName(name string) *Control {
	for _, c := range Controls {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// ctlKey is the Redis or memcached key of a control's lock.
func ctlKey(key string) string { return "ctl:" + key }

type ctlBase struct {
	rdb *redis.Client
	h   Hooks
}

func (ctlBase) Validate(l *driver.Lease) error { return nil }
func (b ctlBase) Close() error                 { return b.rdb.Close() }

func openRedisControl(mk func(ctlBase) driver.Driver) func(ctx context.Context, addrs []string, o lock.Options, h Hooks) (*lock.Locker, error) {
	return func(ctx context.Context, addrs []string, o lock.Options, h Hooks) (*lock.Locker, error) {
		rdb := redis.NewClient(&redis.Options{
			Addr: addrs[0], MaxRetries: -1, DisableIdentity: true,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		})
		return lock.New(mk(ctlBase{rdb: rdb, h: h}), &o), nil
	}
}

// ownerDel is the release of the controls whose flaw is the key's missing
// expiry (setnx-del, setnx-then-expire): GET, compare, DEL (not atomic),
// so that each has only the flaw it stands for. With a plain DEL, the
// clean-up of a contender's attempt abandoned at its deadline (lock
// releases by owner after an attempt whose outcome is unknown) deleted the
// dead holder's orphan that holder-kill is there to find.
func (b ctlBase) ownerDel(ctx context.Context, l *driver.Lease) error {
	v, err := b.rdb.Get(ctx, ctlKey(l.Key)).Result()
	if err == redis.Nil || (err == nil && v != l.Owner) {
		return driver.ErrNotHeld
	}
	if err != nil {
		return err
	}
	return notHeldIfZero(b.rdb.Del(ctx, ctlKey(l.Key)).Result())
}

func notHeldIfZero(n int64, err error) error {
	if err != nil {
		return err
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// setnxDel: SETNX key owner; DEL key. No expiry at all.
type setnxDel struct{ ctlBase }

func (d *setnxDel) Acquire(ctx context.Context, l *driver.Lease) error {
	ok, err := d.rdb.SetNX(ctx, ctlKey(l.Key), l.Owner, 0).Result()
	if err != nil {
		return err
	}
	if !ok {
		return driver.ErrHeld
	}
	l.Validity = l.TTL
	return nil
}

func (d *setnxDel) Release(ctx context.Context, l *driver.Lease) error {
	return d.ownerDel(ctx, l)
}

func (d *setnxDel) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	return ttl, notHeldIfZero(d.rdb.Exists(ctx, ctlKey(l.Key)).Result())
}

// setnxThenExpire: SETNX key owner, then PEXPIRE key ttl in a second
// command; a crash between the two leaves a key without expiry.
type setnxThenExpire struct{ ctlBase }

func (d *setnxThenExpire) Acquire(ctx context.Context, l *driver.Lease) error {
	ok, err := d.rdb.SetNX(ctx, ctlKey(l.Key), l.Owner, 0).Result()
	if err != nil {
		return err
	}
	if !ok {
		return driver.ErrHeld
	}
	d.h.At("acquire-gap")
	if err := d.rdb.PExpire(ctx, ctlKey(l.Key), l.TTL).Err(); err != nil {
		return err
	}
	l.Validity = l.TTL
	return nil
}

func (d *setnxThenExpire) Release(ctx context.Context, l *driver.Lease) error {
	return d.ownerDel(ctx, l)
}

func (d *setnxThenExpire) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	ok, err := d.rdb.PExpire(ctx, ctlKey(l.Key), ttl).Result()
	if err == nil && !ok {
		err = driver.ErrNotHeld
	}
	return ttl, err
}

// setnxExDel: SET key owner NX PX ttl (atomic), but release is a plain DEL
// and refresh a plain PEXPIRE: neither checks the owner.
type setnxExDel struct{ ctlBase }

func (d *setnxExDel) Acquire(ctx context.Context, l *driver.Lease) error {
	ok, err := d.rdb.SetNX(ctx, ctlKey(l.Key), l.Owner, l.TTL).Result()
	if err != nil {
		return err
	}
	if !ok {
		return driver.ErrHeld
	}
	l.Validity = l.TTL
	return nil
}

func (d *setnxExDel) Release(ctx context.Context, l *driver.Lease) error {
	return notHeldIfZero(d.rdb.Del(ctx, ctlKey(l.Key)).Result())
}

func (d *setnxExDel) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	ok, err := d.rdb.PExpire(ctx, ctlKey(l.Key), ttl).Result()
	if err == nil && !ok {
		err = driver.ErrNotHeld
	}
	return ttl, err
}

// getCompareDel: SET NX PX; release is GET, compare with the owner, then
// DEL, in two commands: the key can change hands in between.
type getCompareDel struct{ ctlBase }

func (d *getCompareDel) Acquire(ctx context.Context, l *driver.Lease) error {
	return (&setnxExDel{d.ctlBase}).Acquire(ctx, l)
}

func (d *getCompareDel) owned(ctx context.Context, l *driver.Lease) error {
	v, err := d.rdb.Get(ctx, ctlKey(l.Key)).Result()
	if err == redis.Nil || (err == nil && v != l.Owner) {
		return driver.ErrNotHeld
	}
	return err
}

func (d *getCompareDel) Release(ctx context.Context, l *driver.Lease) error {
	if err := d.owned(ctx, l); err != nil {
		return err
	}
	d.h.At("release-gap")
	return d.rdb.Del(ctx, ctlKey(l.Key)).Err()
}

func (d *getCompareDel) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	if err := d.owned(ctx, l); err != nil {
		return 0, err
	}
	return ttl, d.rdb.PExpire(ctx, ctlKey(l.Key), ttl).Err()
}

// getsetTimestamp is the lock of Redis's old SETNX documentation: the value
// is the expiry time by the client's clock; SETNX takes a free key, and an
// expired one is taken with GETSET if the old value returned is still
// expired. Release checks the holder's own timestamp, then DELs.
type getsetTimestamp struct {
	ctlBase
	mu     sync.Mutex
	stamps map[string]int64 // owner → the expiry it wrote (ms)
}

func nowMS() int64 { return time.Now().UnixMilli() }

func (d *getsetTimestamp) Acquire(ctx context.Context, l *driver.Lease) error {
	k := ctlKey(l.Key)
	now := nowMS()
	exp := now + l.TTL.Milliseconds()
	val := strconv.FormatInt(exp, 10)
	ok, err := d.rdb.SetNX(ctx, k, val, 0).Result()
	if err != nil {
		return err
	}
	if !ok {
		cur, err := d.rdb.Get(ctx, k).Int64()
		if err == redis.Nil {
			return &driver.HeldError{} // released meanwhile: try again
		}
		if err != nil {
			return err
		}
		if cur > now {
			return &driver.HeldError{RetryAfter: time.Duration(cur-now) * time.Millisecond}
		}
		//lint:ignore SA1019 the control copies the GETSET recipe it is named after
		old, err := d.rdb.GetSet(ctx, k, val).Int64()
		if err != nil && err != redis.Nil {
			return err
		}
		if err == nil && old > now {
			return &driver.HeldError{} // another client took it first
		}
	}
	d.mu.Lock()
	d.stamps[l.Owner] = exp
	d.mu.Unlock()
	l.Validity = l.TTL
	return nil
}

func (d *getsetTimestamp) stamp(owner string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stamps[owner]
}

func (d *getsetTimestamp) Release(ctx context.Context, l *driver.Lease) error {
	if nowMS() >= d.stamp(l.Owner) {
		return driver.ErrNotHeld // expired: leave the key to whoever has it
	}
	d.h.At("release-gap")
	return notHeldIfZero(d.rdb.Del(ctx, ctlKey(l.Key)).Result())
}

func (d *getsetTimestamp) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	k := ctlKey(l.Key)
	cur, err := d.rdb.Get(ctx, k).Int64()
	if err == redis.Nil || (err == nil && cur != d.stamp(l.Owner)) {
		return 0, driver.ErrNotHeld
	}
	if err != nil {
		return 0, err
	}
	exp := nowMS() + ttl.Milliseconds()
	if err := d.rdb.Set(ctx, k, exp, 0).Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	d.stamps[l.Owner] = exp
	d.mu.Unlock()
	return ttl, nil
}

// memcachedAddDelete: add with a TTL (atomic), but release is a plain
// delete and refresh a plain touch: neither checks the owner.
type memcachedAddDelete struct {
	mc *memcache.Client
}

func openMemcachedControl(ctx context.Context, addrs []string, o lock.Options, h Hooks) (*lock.Locker, error) {
	mc := memcache.New(addrs...)
	mc.Timeout = time.Second
	mc.MaxIdleConns = 16
	return lock.New(&memcachedAddDelete{mc: mc}, &o), nil
}

func secs(ttl time.Duration) int32 { return int32((ttl + time.Second - 1) / time.Second) }

func (d *memcachedAddDelete) Validate(l *driver.Lease) error {
	if l.TTL < 2*time.Second {
		return fmt.Errorf("%w: memcached control: TTL under 2s", driver.ErrInvalid)
	}
	return nil
}

func (d *memcachedAddDelete) Acquire(ctx context.Context, l *driver.Lease) error {
	err := d.mc.Add(&memcache.Item{Key: ctlKey(l.Key), Value: []byte(l.Owner), Expiration: secs(l.TTL)})
	if errors.Is(err, memcache.ErrNotStored) {
		return driver.ErrHeld
	}
	if err != nil {
		return err
	}
	l.Validity = l.TTL
	return nil
}

func (d *memcachedAddDelete) Release(ctx context.Context, l *driver.Lease) error {
	err := d.mc.Delete(ctlKey(l.Key))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return driver.ErrNotHeld
	}
	return err
}

func (d *memcachedAddDelete) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	err := d.mc.Touch(ctlKey(l.Key), secs(ttl))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return 0, driver.ErrNotHeld
	}
	return ttl, err
}

func (d *memcachedAddDelete) Close() error { return d.mc.Close() }
