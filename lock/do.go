package lock

import (
	"context"
	"errors"
)

// Do runs fn while holding key: it calls Lock, runs fn with a context that
// is cancelled when the lease ends (lost, or ctx ended) and carries the
// lease (LeaseFrom: its fencing token for fn's writes), and releases the
// lease when fn returns, or when fn panics (the panic then goes on, after
// the release, to whoever recovers it). fn should stop promptly when its
// ctx is done.
//
// Do returns fn's error, joined with an error wrapping ErrLost if the lease
// was lost while fn ran (fn's work was then not protected to the end, even
// if fn returned nil), and with the error of Unlock if that failed. If Lock
// fails, fn does not run and Do returns that error. A nil ctx, Locker or fn
// gives an error wrapping ErrInvalid, and nothing is locked.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	if l == nil {
		return newError("do", key, ErrInvalid, errNilLocker)
	}
	return Do(ctx, l, key, fn, opts...)
}

// Do is Locker.Do over anything with a Lock method: a *Locker, or a
// wrapper of one that the caller made (to record or change its grants).
// A nil l is refused as a nil Locker is.
func Do(ctx context.Context, l interface {
	Lock(ctx context.Context, key string, opts ...Option) (*Lease, error)
}, key string, fn func(ctx context.Context) error, opts ...Option) error {
	switch {
	case l == nil || l == (*Locker)(nil):
		return newError("do", key, ErrInvalid, errNilLocker)
	case ctx == nil:
		return newError("do", key, ErrInvalid, errNilContext)
	case fn == nil:
		return newError("do", key, ErrInvalid, errors.New("nil fn"))
	}
	lease, err := l.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, lease))
	defer cancel(nil)
	go func() {
		select {
		case <-lease.Done():
			cancel(lease.Err())
		case <-fctx.Done():
		}
	}()
	unlock := func() error {
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
		defer ucancel()
		return lease.Unlock(uctx)
	}
	returned := false
	defer func() {
		if !returned { // fn panicked: release, and let the panic go on
			_ = unlock()
		}
	}()
	ferr := fn(fctx)
	returned = true
	lost := lease.Err()
	uerr := unlock()
	if lost != nil {
		return errors.Join(ferr, lost)
	}
	if errors.Is(uerr, ErrNotHeld) {
		// Lost after fn returned: Done was still open then, so the lease
		// was valid for all of fn's run.
		uerr = nil
	}
	return errors.Join(ferr, uerr)
}

// leaseKey keys, in the context Do gives fn, the lease Do holds.
type leaseKey struct{}

// LeaseFrom returns the lease that Do holds for the fn it calls with ctx
// (or with a context derived from it), and nil for any other context.
// Send its Token with every write the lock guards:
//
//	err := locker.Do(ctx, "orders/42", func(ctx context.Context) error {
//		return store.Write(ctx, lock.LeaseFrom(ctx).Token(), order)
//	})
//
// Within nested Do calls it is the innermost one's lease.
func LeaseFrom(ctx context.Context) *Lease {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}
