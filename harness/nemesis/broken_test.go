package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// The parts the broken variants of TestTeeth are made of: a Locker whose
// calls misbehave, a view of a lease whose methods do, and copies of
// lock.Do with one line broken.

// brokenLocker is the memory driver's Locker with some calls replaced
// (nil: the inner Locker's).
type brokenLocker struct {
	Locker
	tryLock, lockFn func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error)
	closeFn         func() error
}

func (b *brokenLocker) TryLock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	if b.tryLock != nil {
		return b.tryLock(ctx, key, opts...)
	}
	return b.Locker.TryLock(ctx, key, opts...)
}

func (b *brokenLocker) Lock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	if b.lockFn != nil {
		return b.lockFn(ctx, key, opts...)
	}
	return b.Locker.Lock(ctx, key, opts...)
}

func (b *brokenLocker) Close() error {
	if b.closeFn != nil {
		return b.closeFn()
	}
	return b.Locker.Close()
}

// refused is the error of a call a broken Locker turns down.
func refused(key string) error {
	return fmt.Errorf("%w: key %q turned down by a broken variant", lock.ErrNotAcquired, key)
}

// brokenLease is a view of a lease with some methods replaced (nil: the
// lease's).
type brokenLease struct {
	*lock.Lease
	late      *lateDone
	errFn     func() error
	unlockFn  func(ctx context.Context) error
	detachFn  func() (string, error)
	refreshFn func(ctx context.Context, ttl time.Duration) error
}

func (b *brokenLease) Done() <-chan struct{} {
	if b.late != nil {
		return b.late.done(b.Lease)
	}
	return b.Lease.Done()
}

func (b *brokenLease) Err() error {
	if b.errFn != nil {
		return b.errFn()
	}
	return b.Lease.Err()
}

func (b *brokenLease) Unlock(ctx context.Context) error {
	if b.unlockFn != nil {
		return b.unlockFn(ctx)
	}
	return b.Lease.Unlock(ctx)
}

func (b *brokenLease) Detach() (string, error) {
	if b.detachFn != nil {
		return b.detachFn()
	}
	return b.Lease.Detach()
}

func (b *brokenLease) Refresh(ctx context.Context, ttl time.Duration) error {
	if b.refreshFn != nil {
		return b.refreshFn(ctx, ttl)
	}
	return b.Lease.Refresh(ctx, ttl)
}

// lateDone is a Done channel that closes d after the lease's when
// when(Err()) holds then, with it otherwise.
type lateDone struct {
	d    time.Duration
	when func(error) bool
	c    chan struct{}
}

// delayedDone starts the lateDone of l.
func delayedDone(l *lock.Lease, d time.Duration, when func(error) bool) *lateDone {
	ld := &lateDone{d: d, when: when, c: make(chan struct{})}
	go func() {
		<-l.Done()
		if when(l.Err()) {
			time.Sleep(d)
		}
		close(ld.c)
	}()
	return ld
}

// done is the channel: the lease's own once it ended without a delay
// (so that it is seen closed at once), the delayed one otherwise.
func (ld *lateDone) done(l *lock.Lease) <-chan struct{} {
	if closed(l.Done()) && !ld.when(l.Err()) {
		return l.Done()
	}
	return ld.c
}

func isLost(err error) bool     { return errors.Is(err, lock.ErrLost) }
func isDetached(err error) bool { return errors.Is(err, lock.ErrDetached) }
func always(error) bool         { return true }

// unlockSoon releases l in the background after d.
func unlockSoon(l *lock.Lease, d time.Duration) {
	go func() {
		time.Sleep(d)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Unlock(ctx)
	}()
}

// doUnlockLate is lock.Do whose release, when fn returns or panics, comes
// 300ms after Do returned.
func doUnlockLate(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...lock.Option) error {
	lease, err := l.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-lease.Done():
			cancel(lease.Err())
		case <-fctx.Done():
		}
	}()
	defer unlockSoon(lease, 300*time.Millisecond) // the bug: Unlock, not waited for
	return fn(fctx)
}

// doKeepCtx is lock.Do whose fn context does not end with the lease
// (only when Do returns); its leases are short and not renewed, so that
// they end while fn runs (a random Do's seldom do: each process's first
// Do, whose fn outlives its lease, always does).
func doKeepCtx(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...lock.Option) error {
	opts = append(opts, lock.WithTTL(150*time.Millisecond), lock.WithDisableAutoRenew(true))
	lease, err := l.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(ctx) // the bug: not cancelled when the lease ends
	defer cancel()
	defer func() {
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), lock.DefaultReleaseTimeout)
		defer ucancel()
		lease.Unlock(uctx)
	}()
	return fn(fctx)
}

// doSwallow is lock.Do that returns an error when fn panics, instead of
// letting the panic go on.
func doSwallow(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...lock.Option) (err error) {
	defer func() {
		if p := recover(); p != nil { // the bug
			err = errors.New("fn panicked")
		}
	}()
	return lock.Do(ctx, l, key, fn, opts...)
}
