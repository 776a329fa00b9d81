package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// A worker is the program under a lock, as a holder runs it (in this
// process, or in a child): Lock, then write to the fenced resource every
// writeEvery, looking at Done right before each write, until told to
// Unlock or until Done closes. It reports everything to a sink.
// Locker is what a worker uses of a *lock.Locker; a target may wrap one
// (to close a client it made after the Locker).
type Locker interface {
	Lock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error)
	TryLock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error)
	Close() error
}

type worker struct {
	name   string
	locker Locker
	sink   sink

	mu   sync.Mutex
	cur  *held // the lease being held or unlocked
	last *held // the latest lease
}

const writeEvery = 20 * time.Millisecond

// sink is where a worker reports: the Resource itself for holders in this
// process, the parent's SinkRPC for child processes.
type sink interface {
	Grant(holder, key string, token uint64, deadlineIn time.Duration) (LeaseID, error)
	Write(holder string, id LeaseID, token uint64, deadlineIn time.Duration) (bool, error)
	Done(id LeaseID, errText string)
	Unlocking(id LeaseID)
	Unlocked(id LeaseID, errText string)
	// Checkpoint is called at named points (before Unlock; inside the
	// control drivers' non-atomic steps); the parent may pause or kill a
	// child process there.
	Checkpoint(holder, point string)
}

type held struct {
	lease     *lock.Lease
	id        LeaseID
	stop      chan struct{} // closed to stop writing
	writer    chan struct{} // closed when the writer stopped
	seen      chan struct{} // closed when Done was seen and reported
	unlocking bool
}

// LockArgs are a lock request to a worker.
type LockArgs struct {
	Key     string
	Try     bool          // TryLock instead of Lock
	Timeout time.Duration // bounds the call
	TTL     time.Duration // 0: the Locker's
	NoRenew bool          // WithAutoRenew(false)
}

var errNoLease = errors.New("chaos: the worker holds no lease")

func (w *worker) lock(a LockArgs) (id LeaseID, token uint64, doa, fails int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.Timeout)
	defer cancel()
	var opts []lock.Option
	if a.TTL > 0 {
		opts = append(opts, lock.WithTTL(a.TTL))
	}
	if a.NoRenew {
		opts = append(opts, lock.WithDisableAutoRenew(true))
	}
	var lastFail error
	for {
		var lease *lock.Lease
		if a.Try {
			lease, err = w.locker.TryLock(ctx, a.Key, opts...)
		} else {
			lease, err = w.locker.Lock(ctx, a.Key, opts...)
		}
		if err != nil {
			// Lock gives up on a backend error (a server that paused or
			// restarted, a stale pooled connection); a program that must
			// have the lock tries again until its own deadline.
			if !a.Try && ctx.Err() == nil && !errors.Is(err, lock.ErrInvalid) && !errors.Is(err, lock.ErrClosed) {
				fails, lastFail = fails+1, err
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if lastFail != nil {
				err = fmt.Errorf("%w (after %d failures, the last: %v)", err, fails, lastFail)
			}
			return 0, 0, doa, fails, err
		}
		id, err = w.sink.Grant(w.name, a.Key, lease.Token(), time.Until(lease.Deadline()))
		if err != nil {
			lease.Unlock(context.Background())
			return 0, 0, doa, fails, err
		}
		h := &held{lease: lease, id: id, stop: make(chan struct{}), writer: make(chan struct{}), seen: make(chan struct{})}
		w.mu.Lock()
		w.cur, w.last = h, h
		w.mu.Unlock()
		go func() {
			<-lease.Done()
			w.sink.Done(id, errText(lease.Err()))
			close(h.seen)
		}()
		// A grant whose request was sent longer than its validity ago
		// (it waited out a fault) comes back already past its local
		// deadline: lock loses it at once. A program would lock again.
		if !time.Now().Before(lease.Deadline()) && !a.Try {
			doa++
			<-h.seen
			continue
		}
		go w.write(h)
		return id, lease.Token(), doa, fails, nil
	}
}

func (w *worker) write(h *held) {
	defer close(h.writer)
	t := time.NewTicker(writeEvery)
	defer t.Stop()
	for {
		select {
		case <-h.lease.Done():
			return
		case <-h.stop:
			return
		default:
		}
		w.sink.Write(w.name, h.id, h.lease.Token(), time.Until(h.lease.Deadline()))
		select {
		case <-h.lease.Done():
			return
		case <-h.stop:
			return
		case <-t.C:
		}
	}
}

// unlock stops writing, reports that the holder lets go, passes the
// "unlock" checkpoint and calls Unlock. Called again after a failed
// Unlock, it retries Unlock.
func (w *worker) unlock(timeout time.Duration) error {
	w.mu.Lock()
	h := w.cur
	first := h != nil && !h.unlocking
	if first {
		h.unlocking = true
	}
	w.mu.Unlock()
	if h == nil {
		return errNoLease
	}
	if first {
		close(h.stop)
		<-h.writer
		w.sink.Unlocking(h.id)
		w.sink.Checkpoint(w.name, "unlock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := h.lease.Unlock(ctx)
	w.sink.Unlocked(h.id, errText(err))
	if err == nil || errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrClosed) {
		w.mu.Lock()
		if w.cur == h {
			w.cur = nil
		}
		w.mu.Unlock()
	}
	return err
}

// waitDone waits up to d for the latest lease's Done to be seen.
func (w *worker) waitDone(d time.Duration) bool {
	w.mu.Lock()
	h := w.last
	w.mu.Unlock()
	if h == nil {
		return false
	}
	select {
	case <-h.seen:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.seen:
		return true
	case <-t.C:
		return false
	}
}

// close lets go of a lease still held (reported as an unlock) and closes
// the Locker, which releases it and waits for background work.
func (w *worker) close() error {
	w.mu.Lock()
	h := w.cur
	first := h != nil && !h.unlocking
	if first {
		h.unlocking = true
	}
	w.mu.Unlock()
	if first {
		close(h.stop)
		<-h.writer
		w.sink.Unlocking(h.id)
	}
	err := w.locker.Close()
	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	if last != nil {
		select {
		case <-last.seen:
		case <-time.After(5 * time.Second):
		}
	}
	return err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// localSink reports straight to a Resource.
type localSink struct{ res *Resource }

func (s localSink) Grant(holder, key string, token uint64, deadlineIn time.Duration) (LeaseID, error) {
	return s.res.Grant(key, holder, token, deadlineIn), nil
}
func (s localSink) Write(holder string, id LeaseID, token uint64, deadlineIn time.Duration) (bool, error) {
	return s.res.Write(id, token, s.res.Now()+Stamp(deadlineIn))
}
func (s localSink) Done(id LeaseID, errText string)     { s.res.Done(id, errText) }
func (s localSink) Unlocking(id LeaseID)                { s.res.Unlocking(id) }
func (s localSink) Unlocked(id LeaseID, errText string) { s.res.Unlocked(id, errText) }
func (s localSink) Checkpoint(holder, point string)     {}
