package lock

import (
	"context"
	"sync/atomic"
)

// within runs f, a driver call bound to ctx, and returns its error with
// ok true; or, if ctx ends first, returns at once with ok false while f
// goes on in the background, and after is called with f's error when it
// returns (after may be nil).
//
// Backend clients do not all stop a request in flight when its context is
// cancelled (go-redis honours only deadlines, and only with
// ContextTimeoutEnabled; gomemcache and go-zookeeper take no context), and
// drivers clean up after a cancelled wait (leaving a queue) before they
// return. The caller's promise is that every call returns by its context's
// end: within keeps it, and after deals with what f did meanwhile (a grant
// to release, say). Close waits for f like for any background release.
func (lk *locker) within(ctx context.Context, f func() error, after func(error)) (err error, ok bool) {
	if ctx.Done() == nil || !lk.bg.add() {
		return f(), true
	}
	const (
		running = iota
		finished
		abandoned
	)
	var state atomic.Int32
	res := make(chan error, 1)
	go func() {
		defer lk.bg.done()
		err := f()
		if state.CompareAndSwap(running, finished) {
			res <- err
			return
		}
		if after != nil {
			after(err)
		}
	}()
	select {
	case err := <-res:
		return err, true
	case <-ctx.Done():
		if state.CompareAndSwap(running, abandoned) {
			return ctx.Err(), false
		}
		return <-res, true
	}
}
