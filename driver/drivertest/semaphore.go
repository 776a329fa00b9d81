package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// semLockers returns n Lockers of h, or, when the driver grants no
// permits (Caps.Permits unset), checks that it refuses them with
// ErrUnsupported, and ends the test.
func semLockers(t *testing.T, h Harness, n int, o *lock.Options) []*lock.Locker {
	t.Helper()
	if !h.Caps().Permits {
		l := h.NewLocker(t, o)
		err := l.Supports(lock.Permits)
		if !errors.Is(err, lock.ErrUnsupported) {
			t.Fatalf("Supports(Permits) on a driver without permits: err = %v, want ErrUnsupported", err)
		}
		if _, err := l.TryAcquire(ctx(t, 10*time.Second), key(t), 2); !errors.Is(err, lock.ErrUnsupported) {
			t.Fatalf("TryAcquire on a driver without permits: err = %v, want ErrUnsupported", err)
		}
		t.Logf("refused as it should be: %v", err)
		// A permit's handle is refused as well, before any I/O: with a
		// context already cancelled, any I/O would fail with its error.
		h := "dlock1.p2.0123456789abcdef0123456789abcdef.12." + "a2V5"
		if _, err := l.Resume(cancelled(), h); !errors.Is(err, lock.ErrInvalid) || errors.Is(err, context.Canceled) {
			t.Fatalf("Resume of a permit's handle on a driver without permits: err = %v, want ErrInvalid before any I/O", err)
		}
		t.SkipNow()
	}
	var ls []*lock.Locker
	for range n {
		sl := h.NewLocker(t, o)
		err := sl.Supports(lock.Permits)
		if err != nil {
			t.Fatalf("Caps.Permits is set but: %v", err)
		}
		ls = append(ls, sl)
	}
	return ls
}

func mustAcquire(t *testing.T, l *lock.Locker, k string, limit int, opts ...lock.Option) *lock.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx(t, 10*time.Second), k, limit, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q, %d): %v", k, limit, err)
	}
	return lease
}

// At most limit permits at once: TryAcquire gets limit of them and then
// fails; every grant's token is above every earlier one; a released permit
// can be taken again; and locks of the key are refused while permits are
// held (and the other way round).
func testSemaphoreLimit(t *testing.T, h Harness) {
	ls := semLockers(t, h, 4, nil)
	k := key(t)
	const limit = 3
	var held []*lock.Lease
	var last uint64
	for i := range limit {
		p, err := ls[i].TryAcquire(ctx(t, 10*time.Second), k, limit)
		if err != nil {
			t.Fatalf("TryAcquire %d of %d: %v", i+1, limit, err)
		}
		if p.Limit() != limit || p.Key() != k {
			t.Errorf("permit: Limit %d Key %q; want %d, %q", p.Limit(), p.Key(), limit, k)
		}
		if p.Token() <= last {
			t.Errorf("permit %d token %d not above the one before, %d", i+1, p.Token(), last)
		}
		last = p.Token()
		held = append(held, p)
	}
	if _, err := ls[3].TryAcquire(ctx(t, 10*time.Second), k, limit); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryAcquire beyond the limit: err = %v, want ErrNotAcquired and ErrHeld", err)
	}
	assertHeld(t, ls[3], k, "a semaphore's permits")
	if ls[3].Supports(lock.SharedLeases) == nil {
		if _, err := ls[3].TryRLock(ctx(t, 10*time.Second), k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("TryRLock of a key with permits held: err = %v, want ErrNotAcquired", err)
		}
	}
	if err := held[1].Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock of a permit: %v", err)
	}
	p, err := ls[3].TryAcquire(ctx(t, 10*time.Second), k, limit)
	if err != nil {
		t.Fatalf("TryAcquire after a permit was returned: %v", err)
	}
	if p.Token() <= last {
		t.Errorf("token %d of a permit taken again not above the last, %d", p.Token(), last)
	}
	held[1] = p
	for _, p := range held {
		if err := p.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
	w := mustLock(t, ls[0], k)
	if w.Token() <= p.Token() {
		t.Errorf("a lock's token %d after the permits not above theirs, %d", w.Token(), p.Token())
	}
	if _, err := ls[1].TryAcquire(ctx(t, 10*time.Second), k, limit); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryAcquire of a locked key: err = %v, want ErrNotAcquired", err)
	}
	w.Unlock(ctx(t, 10*time.Second))
	assertNoResidue(t, h, k)
}

// Under contention, never more than limit holders at once (counted by the
// holders themselves, each inside its lease's lifetime), and the limit is
// reached.
func testSemaphoreContention(t *testing.T, h Harness) {
	const limit, workers, rounds = 2, 6, 4
	ls := semLockers(t, h, 3, nil)
	k := key(t)
	var in, most atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				p, err := ls[i%len(ls)].Acquire(ctx(t, 60*time.Second), k, limit)
				if err != nil {
					errs <- err
					return
				}
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
				in.Add(-1)
				select {
				case <-p.Done():
					errs <- fmt.Errorf("permit lost while held: %v", p.Err())
				default:
				}
				if err := p.Unlock(ctx(t, 10*time.Second)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker: %v", err)
	}
	if m := most.Load(); m > limit {
		t.Errorf("%d holders at once; the limit is %d", m, limit)
	} else if m < limit {
		t.Errorf("at most %d holder at once under contention; want the limit, %d", m, limit)
	}
	assertNoResidue(t, h, k)
}

// A limit other than the one the key's permits were granted with is
// refused with ErrInvalid, and changes nothing; once the permits are gone,
// the key takes any limit.
func testSemaphoreLimitMismatch(t *testing.T, h Harness) {
	ls := semLockers(t, h, 2, nil)
	k := key(t)
	p := mustAcquire(t, ls[0], k, 2)
	for _, try := range []func() error{
		func() error { _, err := ls[1].TryAcquire(ctx(t, 10*time.Second), k, 3); return err },
		func() error { _, err := ls[1].Acquire(ctx(t, 10*time.Second), k, 1); return err },
	} {
		if err := try(); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("a different limit for a key in use: err = %v, want ErrInvalid", err)
		}
	}
	// The holder's permit is untouched, and the second permit is still there.
	q := mustAcquire(t, ls[1], k, 2)
	if _, err := ls[1].TryAcquire(ctx(t, 10*time.Second), k, 2); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("a third permit of two: err = %v, want ErrNotAcquired", err)
	}
	p.Unlock(ctx(t, 10*time.Second))
	q.Unlock(ctx(t, 10*time.Second))
	r := mustAcquire(t, ls[1], k, 5)
	r.Unlock(ctx(t, 10*time.Second))
	// Out-of-range limits are refused before any I/O.
	for _, n := range []int{0, -1, lock.MaxPermits + 1} {
		if _, err := ls[0].TryAcquire(ctx(t, 10*time.Second), k, n); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("limit %d: err = %v, want ErrInvalid", n, err)
		}
	}
	if _, err := ls[0].TryAcquire(ctx(t, 10*time.Second), k, 2, lock.WithOwner("job")); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("a named owner's permit: err = %v, want ErrInvalid (permits are not reentrant)", err)
	}
	assertNoResidue(t, h, k)
}

// A crashed holder's permit returns within its TTL (session timeout), and
// not much before.
func testSemaphoreCrashedHolder(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	bound := h.Caps().expiryBound(ttl)
	ls := semLockers(t, h, 2, &lock.Options{TTL: ttl})
	k := key(t)
	start := time.Now()
	expires := newCanary(start.Add(bound))
	mustAcquire(t, ls[0], k, 1)
	h.Crash(t, ls[0])
	time.Sleep(bound / 3)
	if _, err := ls[1].TryAcquire(ctx(t, 10*time.Second), k, 1); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a crashed holder's permit at a third of its lifetime: err = %v, want ErrNotAcquired", err)
	}
	p, err := ls[1].Acquire(ctx(t, bound+5*time.Second), k, 1)
	if err != nil {
		t.Fatalf("a crashed holder's permit did not return: %v", err)
	}
	defer p.Unlock(ctx(t, 10*time.Second))
	checkBy(t, expires, time.Now(), time.Second, "permit returned %v after the grant; want within %v plus a second", time.Since(start), bound)
}

// A waiting Acquire returns promptly when its context ends, with
// ErrNotAcquired and the context's error, and leaves nothing behind.
func testSemaphoreCancel(t *testing.T, h Harness) {
	ls := semLockers(t, h, 3, nil)
	k := key(t)
	const limit = 2
	a, b := mustAcquire(t, ls[0], k, limit), mustAcquire(t, ls[1], k, limit)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := 300 * time.Millisecond
			if i > 0 {
				d = time.Duration(rand.IntN(400)) * time.Millisecond
			}
			c, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			ends := newCanary(start.Add(d))
			_, err := ls[2].Acquire(c, k, limit)
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("cancelled Acquire: err = %v, want ErrNotAcquired and DeadlineExceeded", err)
			}
			checkBy(t, ends, time.Now(), time.Second, "cancelled Acquire returned %v after its context ended", time.Since(start)-d)
		}()
	}
	wg.Wait()
	a.Unlock(ctx(t, 10*time.Second))
	b.Unlock(ctx(t, 10*time.Second))
	assertNoResidue(t, h, k)
	// As in C7/CancelManyWaiters, a late grant is released in the
	// background: the key is free soon, not at once.
	assertFreeBy(t, ls[2], k, time.Now().Add(time.Second), "after every permit waiter was cancelled and the holders left")
}

// Waiters are served in arrival order on drivers that queue: a permit
// waiter is not passed by a later one.
func testSemaphoreFIFO(t *testing.T, h Harness) {
	if !h.Caps().Notify {
		t.Skip("waiters poll by their retry strategy: no order is promised")
	}
	ls := semLockers(t, h, 4, nil)
	k := key(t)
	const limit = 2
	a, b := mustAcquire(t, ls[0], k, limit), mustAcquire(t, ls[1], k, limit)
	order := make(chan string, 2)
	var wg sync.WaitGroup
	for i, name := range []string{"first", "second"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := ls[2+i].Acquire(ctx(t, 30*time.Second), k, limit)
			if err != nil {
				t.Errorf("%s waiter: %v", name, err)
				return
			}
			order <- name
			time.Sleep(200 * time.Millisecond)
			p.Unlock(ctx(t, 10*time.Second))
		}()
		time.Sleep(300 * time.Millisecond) // the first is queued before the second comes
	}
	a.Unlock(ctx(t, 10*time.Second))
	first := <-order
	if first != "first" {
		t.Errorf("the %s waiter got the returned permit first", first)
	}
	b.Unlock(ctx(t, 10*time.Second))
	wg.Wait()
	assertNoResidue(t, h, k)
}

// Done closes, with ErrLost, when a permit is deleted behind the holder's
// back, and its Unlock then says ErrNotHeld.
func testSemaphoreDoneOnDelete(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	ls := semLockers(t, h, 2, &lock.Options{TTL: ttl})
	k := key(t)
	p := mustAcquire(t, ls[0], k, 3)
	q := mustAcquire(t, ls[1], k, 3)
	if err := h.DeleteKey(ctx(t, 10*time.Second), k); err != nil {
		t.Fatalf("DeleteKey: %v", err)
	}
	bound := ttl/3 + 3*time.Second
	for _, l := range []*lock.Lease{p, q} {
		if !closedBy(t, l.Done(), bound) {
			t.Fatalf("Done still open %v after the permits were deleted", bound)
		}
		if err := l.Err(); !errors.Is(err, lock.ErrLost) {
			t.Errorf("Err() = %v, want ErrLost", err)
		}
		if err := l.Unlock(ctx(t, 10*time.Second)); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Unlock of a lost permit: err = %v, want ErrNotHeld", err)
		}
	}
	assertNoResidue(t, h, k)
}

// A permit detached through one Locker is resumed through another, with
// its limit and token; a resumed permit counts against the limit, and its
// Unlock returns it.
func testSemaphoreResume(t *testing.T, h Harness) {
	ls := semLockers(t, h, 3, nil)
	if !h.Caps().Resume {
		t.Skip("the driver cannot resume leases (Resume/TakesOver checks the refusal)")
	}
	k := key(t)
	p := mustAcquire(t, ls[0], k, 1)
	handle, err := p.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if _, err := ls[2].TryAcquire(ctx(t, 10*time.Second), k, 1); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("the detached permit is not held: TryAcquire err = %v", err)
	}
	r, err := ls[1].Resume(ctx(t, 10*time.Second), handle)
	if err != nil {
		t.Fatalf("Resume of a permit: %v", err)
	}
	if r.Token() != p.Token() || r.Limit() != 1 {
		t.Errorf("resumed permit: token %d limit %d; want %d, 1", r.Token(), r.Limit(), p.Token())
	}
	if q, err := ls[2].TryAcquire(ctx(t, 10*time.Second), k, 1); !errors.Is(err, lock.ErrNotAcquired) {
		if err == nil {
			q.Unlock(ctx(t, 10*time.Second))
		}
		t.Errorf("the resumed permit does not count against the limit: TryAcquire err = %v, want ErrNotAcquired", err)
	}
	if err := r.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock of the resumed permit: %v", err)
	}
	if _, err := ls[2].Resume(ctx(t, 10*time.Second), handle); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Resume of a returned permit: err = %v, want ErrNotHeld", err)
	}
	q := mustAcquire(t, ls[2], k, 1)
	q.Unlock(ctx(t, 10*time.Second))
	assertNoResidue(t, h, k)
}
