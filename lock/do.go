package lock

import (
	"context"
	"errors"
)

// Do runs fn while holding key: it calls Lock, runs fn with a context that
// is cancelled when the lease ends (lost, or ctx ended), and releases the
// lease when fn returns. fn should stop promptly when its ctx is done.
//
// Do returns fn's error, joined with an error wrapping ErrLost if the lease
// was lost while fn ran (fn's work was then not protected to the end, even
// if fn returned nil), and with the error of Unlock if that failed. If Lock
// fails, fn does not run and Do returns that error.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...Option) error {
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
	ferr := fn(fctx)
	lost := lease.Err()
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
	defer ucancel()
	uerr := lease.Unlock(uctx)
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
