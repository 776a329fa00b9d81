package lock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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
//
// A driver that keeps that promise itself (driver.Caps.ReturnsAtContextEnd) has f run on
// the caller's goroutine: a hand-off costs two goroutine wake-ups, a third
// of a Lock+Unlock's client CPU on a 2-core machine. When ctx has ended by
// the time f returns, the outcome is treated as the hand-off treats a call
// that outlived its context: after gets f's error and the caller ctx's.
func (lk *Locker) within(ctx context.Context, f func() error, after func(error)) (ok bool, err error) {
	if ctx.Done() == nil {
		return true, f()
	}
	if lk.prompt {
		err := f()
		if ctx.Err() != nil {
			return lk.late(ctx, err, after)
		}
		return true, err
	}
	if !lk.bg.add() {
		return true, f()
	}
	c := calls.Get().(*call)
	c.fj = funcJob{f, after}
	c.j = &c.fj
	return lk.dispatch(ctx, c)
}

// A job is a driver call for withinJob: run makes it, and after, when the
// caller gave up waiting for it, deals with what it did (err is run's
// error). The acquisition waiters are jobs, so that an attempt costs no
// closures.
type job interface {
	run() error
	after(err error)
}

// withinJob is within for a job.
func (lk *Locker) withinJob(ctx context.Context, j job) (ok bool, err error) {
	if ctx.Done() == nil {
		return true, j.run()
	}
	if lk.prompt {
		err := j.run()
		if ctx.Err() != nil {
			return lk.late(ctx, err, j.after)
		}
		return true, err
	}
	if !lk.bg.add() {
		return true, j.run()
	}
	c := calls.Get().(*call)
	c.j = j
	return lk.dispatch(ctx, c)
}

// late ends a call made on the caller's goroutine (a ReturnsAtContextEnd driver's)
// that returned err after ctx ended: as one whose caller gave up on it,
// with after run on a goroutine of its own, as a worker runs it. Once
// Close has stopped background work, the call counts as returned in time,
// as in within.
func (lk *Locker) late(ctx context.Context, err error, after func(error)) (bool, error) {
	if !lk.bg.add() {
		return true, err
	}
	go func() {
		defer lk.bg.done()
		if after != nil {
			after(err)
		}
	}()
	return false, ctx.Err()
}

// dispatch hands c, whose job has joined lk.bg, to a worker, and waits for
// its result or for ctx's end (see within).
func (lk *Locker) dispatch(ctx context.Context, c *call) (ok bool, err error) {
	c.lk = lk
	select {
	case lk.work <- c: // an idle worker takes it
	default:
		if lk.workers.add() {
			go lk.worker(c)
		} else { // Close has stopped the workers
			go c.run()
		}
	}
	select {
	case err := <-c.res:
		c.free()
		return true, err
	case <-ctx.Done():
		if c.state.CompareAndSwap(running, abandoned) {
			return false, ctx.Err() // c.run frees c
		}
		err := <-c.res
		c.free()
		return true, err
	}
}

// Workers. A driver call made on a new goroutine grows that goroutine's
// stack from its small start to what the client library needs (go-redis:
// several copies), which cost a quarter of the client's CPU with 32
// contenders on as many keys. So the goroutines are kept: after a call, a
// worker waits for the next one for up to workerIdle (a caller's next call
// in a loop comes within microseconds), and at most maxIdleWorkers of them
// wait at once; Close ends them.
const (
	workerIdle     = 10 * time.Millisecond
	maxIdleWorkers = 8
)

func (lk *Locker) worker(c *call) {
	defer lk.workers.done()
	var idle *time.Timer
	for {
		c.run()
		if lk.idleWorkers.Add(1) > maxIdleWorkers {
			lk.idleWorkers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case c = <-lk.work:
			lk.idleWorkers.Add(-1)
		case <-idle.C:
			lk.idleWorkers.Add(-1)
			return
		case <-lk.ctx.Done():
			lk.idleWorkers.Add(-1)
			idle.Stop()
			return
		}
	}
}

// A call is one driver call run by within or withinJob, on a worker;
// calls are reused, since a Lock+Unlock cycle makes two.
type call struct {
	state atomic.Int32 // running, then finished or abandoned
	res   chan error   // the job's error, when the caller still waits for it
	lk    *Locker
	j     job
	fj    funcJob // within's job: j points to it
}

// funcJob is the job of within's f and after.
type funcJob struct {
	f    func() error
	then func(error) // within's after; may be nil
}

func (j *funcJob) run() error { return j.f() }

func (j *funcJob) after(err error) {
	if j.then != nil {
		j.then(err)
	}
}

const (
	running = iota
	finished
	abandoned
)

var calls = sync.Pool{New: func() any { return &call{res: make(chan error, 1)} }}

func (c *call) run() {
	lk := c.lk
	defer lk.bg.done()
	err := c.j.run()
	if c.state.CompareAndSwap(running, finished) {
		c.res <- err // the caller receives it and frees c
		return
	}
	c.j.after(err)
	c.free()
}

// free returns c to the pool, once both sides are done with it.
func (c *call) free() {
	c.state.Store(running)
	c.lk, c.j, c.fj = nil, nil, funcJob{}
	calls.Put(c)
}
