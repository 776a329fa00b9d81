package drivertest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Resume: a lease detached through one Locker is resumed through another
// (another process, as far as the backend can tell): same key and token,
// its own deadline and renewal, and its Unlock frees the key. A driver
// that cannot resume (Caps.Resume unset) refuses Resume and Detach with
// ErrInvalid, and the lease it refused to detach is untouched.
func testResumeTakesOver(t *testing.T, h Harness) {
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	ttl := max(h.Caps().ttl(), 2*time.Second)
	la := mustLock(t, a, k, lock.WithTTL(ttl))
	if !h.Caps().Resume {
		if _, err := la.Detach(); !errors.Is(err, lock.ErrInvalid) {
			t.Fatalf("Detach on a driver that cannot resume: err = %v, want ErrInvalid", err)
		}
		if _, err := b.Resume(ctx(t, 10*time.Second), la.Handle()); !errors.Is(err, lock.ErrInvalid) {
			t.Fatalf("Resume on a driver that cannot resume: err = %v, want ErrInvalid", err)
		}
		if closedWithin(la.Done(), 0) {
			t.Fatalf("the refused Detach ended the lease: %v", la.Err())
		}
		assertHeld(t, c, k, "the lease whose Detach was refused")
		if err := la.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Errorf("Unlock: %v", err)
		}
		return
	}
	handle, err := la.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if handle != la.Handle() || !strings.HasPrefix(handle, "dlock1.") {
		t.Errorf("Detach returned %q, Handle %q", handle, la.Handle())
	}
	if !closedWithin(la.Done(), 0) || !errors.Is(la.Err(), lock.ErrDetached) {
		t.Errorf("after Detach: Done closed %v, Err %v; want closed, ErrDetached", closedWithin(la.Done(), 0), la.Err())
	}
	// a's Close must leave the detached grant alone.
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertHeld(t, c, k, "the detached grant after its Locker's Close")
	lb, err := b.Resume(ctx(t, 10*time.Second), handle, lock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if lb.Key() != k || lb.Token() != la.Token() {
		t.Errorf("resumed lease: key %q token %d; want %q, %d", lb.Key(), lb.Token(), k, la.Token())
	}
	if d := time.Until(lb.Deadline()); d <= 0 || d > ttl {
		t.Errorf("resumed lease's deadline in %v; want within its TTL %v", d, ttl)
	}
	// Renewal keeps it past the first grant's TTL.
	time.Sleep(h.Caps().expiryBound(ttl) + 500*time.Millisecond)
	if closedWithin(lb.Done(), 0) {
		t.Fatalf("the resumed lease ended: %v", lb.Err())
	}
	assertHeld(t, c, k, "the resumed lease, renewed past the first grant's TTL")
	if err := lb.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock of the resumed lease: %v", err)
	}
	assertFree(t, c, k, "after the resumed lease's Unlock")
	assertNoResidue(t, h, k)
}

// Resume finds out that the grant is gone (released, or taken by another
// owner since) and refuses with ErrNotAcquired and ErrNotHeld, leaving the
// key's holder alone; a malformed handle is refused with ErrInvalid before
// any I/O; a handle with a token above the grant's is refused on backends
// that record tokens with the grant (the Redis drivers and memcached compare
// with the fencing counter; memory with the grant).
func testResumeGone(t *testing.T, h Harness) {
	if !h.Caps().Resume {
		t.Skip("the driver cannot resume leases: TakesOver checks that it refuses")
	}
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	la := mustLock(t, a, k)
	handle := la.Handle()
	forged := strings.Replace(handle, "."+strconv.FormatUint(la.Token(), 10)+".", "."+strconv.FormatUint(la.Token()+1_000_000_000, 10)+".", 1)
	if _, err := b.Resume(ctx(t, 10*time.Second), forged); !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("Resume with a token above the grant's: err = %v, want ErrNotAcquired and ErrNotHeld", err)
	}
	if err := la.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(ctx(t, 10*time.Second), handle); !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("Resume of a released lease: err = %v, want ErrNotAcquired and ErrNotHeld", err)
	}
	lc := mustLock(t, c, k)
	if _, err := b.Resume(ctx(t, 10*time.Second), handle); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Resume of a lease whose key another holds: err = %v, want ErrNotHeld", err)
	}
	if err := lc.Refresh(ctx(t, 10*time.Second), h.Caps().ttl()); err != nil {
		t.Errorf("the holder's Refresh after a refused Resume: %v", err)
	}
	// With a context already cancelled, any I/O would fail with its error.
	for _, bad := range []string{"", "dlock1.", "dlock1.x.zz.1.aw", handle + ".x", strings.Replace(handle, "dlock1.x.", "dlock1.q.", 1), "dlock2" + handle[6:]} {
		if _, err := b.Resume(cancelled(), bad); !errors.Is(err, lock.ErrInvalid) || errors.Is(err, context.Canceled) {
			t.Errorf("Resume(%q): err = %v, want ErrInvalid before any I/O", bad, err)
		}
	}
	lc.Unlock(ctx(t, 10*time.Second))
}

// A process that crashed holding a lease is replaced by one that resumes
// it (from a handle it left in a file, say) before the TTL: the key is
// never free in between.
func testResumeAfterCrash(t *testing.T, h Harness) {
	if !h.Caps().Resume {
		t.Skip("the driver cannot resume leases: TakesOver checks that it refuses")
	}
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	ttl := max(h.Caps().ttl(), 3*time.Second)
	la := mustLock(t, a, k, lock.WithTTL(ttl))
	handle := la.Handle()
	h.Crash(t, a)
	lb, err := b.Resume(ctx(t, 10*time.Second), handle, lock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("Resume after the holder crashed: %v", err)
	}
	time.Sleep(ttl + 500*time.Millisecond)
	assertHeld(t, c, k, "the resumed lease, a TTL after the crash")
	if closedWithin(lb.Done(), 0) {
		t.Fatalf("the resumed lease ended: %v", lb.Err())
	}
	if err := lb.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// A Resume only ever extends the grant: B resumes A's handle with a short
// TTL and no renewal, and once B's TTL has passed (and B's lease has ended
// at its deadline), the key is still held for everyone else while A's
// lease, whose deadline counts on its own long TTL, is held: for an
// exclusive lease, and a share, a permit and a hold of a named owner where
// the driver has them. Neither B's Resume nor B's end may cut A's grant
// short.
func testResumeNeverShortens(t *testing.T, h Harness) {
	if !h.Caps().Resume {
		t.Skip("the driver cannot resume leases: TakesOver checks that it refuses")
	}
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	short := h.Caps().ttl()
	long := max(30*time.Second, 6*short)
	gs := grantEachKind(t, h, a, c, lock.WithTTL(long), lock.WithDisableAutoRenew(true))
	resumed := resumeEach(t, b, gs, lock.WithTTL(short), lock.WithDisableAutoRenew(true))
	// Past the resumed leases' TTL, and their deadlines.
	time.Sleep(short + 1500*time.Millisecond)
	for i, g := range gs {
		if !closedWithin(resumed[i].Done(), 0) {
			t.Errorf("the resumed %s lease is still held past its TTL without renewal", g.what)
		}
		g.assertExcluded(t, g.lease, "the first", "the short Resume's TTL", "the Resume, or the resumed lease's end, cut its grant short")
	}
	unlockAll(t, h, gs)
}

// Renewal only ever extends the grant, as Resume does: B resumes A's
// handle with a short TTL and renews it (in batches where the driver
// batches, then by Refresh), and then B's process dies (its leases end
// without a release: Detach). Once B's TTL has passed, the key is still
// held for everyone else while A's lease, which counts on its own long
// TTL, is held: B's renewals must not have cut A's grant to B's TTL.
func testResumeRenewalNeverShortens(t *testing.T, h Harness) {
	if !h.Caps().Resume {
		t.Skip("the driver cannot resume leases: TakesOver checks that it refuses")
	}
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	short := h.Caps().ttl()
	long := max(30*time.Second, 6*short)
	gs := grantEachKind(t, h, a, c, lock.WithTTL(long), lock.WithDisableAutoRenew(true))
	resumed := resumeEach(t, b, gs, lock.WithTTL(short))
	time.Sleep(short) // two or three renewals of B's leases
	for i, g := range gs {
		if err := resumed[i].Refresh(ctx(t, 10*time.Second), short); err != nil {
			t.Fatalf("Refresh of the resumed %s lease: %v", g.what, err)
		}
		if _, err := resumed[i].Detach(); err != nil {
			t.Fatalf("Detach of the resumed %s lease: %v", g.what, err)
		}
	}
	// Past the last refresh's TTL.
	time.Sleep(short + 1500*time.Millisecond)
	for _, g := range gs {
		g.assertExcluded(t, g.lease, "the first", "the resumed lease's TTL", "the resumed lease's renewals cut its grant short")
	}
	unlockAll(t, h, gs)
}

// A Lease lost by its deadline leaves its grant alone: A holds with a
// short TTL and no renewal, B resumes A's handle with a long TTL and
// renews it. Once A's lease is lost (its deadline passed), the key is
// still held for everyone else while B's lease is held: A's loss must not
// release the grant that B keeps renewed.
func testResumeLossKeepsResumed(t *testing.T, h Harness) {
	if !h.Caps().Resume {
		t.Skip("the driver cannot resume leases: TakesOver checks that it refuses")
	}
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	short := h.Caps().ttl()
	long := max(30*time.Second, 6*short)
	gs := grantEachKind(t, h, a, c, lock.WithTTL(short), lock.WithDisableAutoRenew(true))
	resumed := resumeEach(t, b, gs, lock.WithTTL(long))
	for _, g := range gs {
		if !closedBy(t, g.lease.Done(), short+2*time.Second) {
			t.Fatalf("the first %s lease is still held past its TTL without renewal", g.what)
		}
		if !errors.Is(g.lease.Err(), lock.ErrLost) {
			t.Errorf("the first %s lease ended with %v; want ErrLost", g.what, g.lease.Err())
		}
	}
	time.Sleep(time.Second) // time for a background release to land
	for i, g := range gs {
		g.assertExcluded(t, resumed[i], "the resumed", "the first lease's loss", "the lost lease released the grant the resumed one renews")
		gs[i].lease = resumed[i]
	}
	unlockAll(t, h, gs)
}

// kindGrant is a lease of one kind on a key of its own, and a third
// Locker's attempt at that key, which must fail while the lease is held.
type kindGrant struct {
	what  string
	key   string
	lease *lock.Lease
	try   func() (*lock.Lease, error)
}

// grantEachKind takes through a, with opts, an exclusive lease, and a
// share, a permit and a hold of a named owner where the driver has them,
// each on a key of its own; the attempts at those keys are c's.
func grantEachKind(t *testing.T, h Harness, a, c *lock.Locker, opts ...lock.Option) []kindGrant {
	t.Helper()
	var gs []kindGrant
	add := func(what string, take func(k string) (*lock.Lease, error), try func(k string) (*lock.Lease, error)) {
		k := key(t)
		l, err := take(k)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		gs = append(gs, kindGrant{what, k, l, func() (*lock.Lease, error) { return try(k) }})
	}
	tryLock := func(k string) (*lock.Lease, error) { return c.TryLock(ctx(t, 10*time.Second), k) }
	add("exclusive", func(k string) (*lock.Lease, error) {
		return a.Lock(ctx(t, 10*time.Second), k, opts...)
	}, tryLock)
	if h.Caps().Shared {
		add("shared", func(k string) (*lock.Lease, error) {
			return a.RLock(ctx(t, 10*time.Second), k, opts...)
		}, tryLock)
	}
	if h.Caps().Permits {
		add("permit", func(k string) (*lock.Lease, error) {
			return a.Acquire(ctx(t, 10*time.Second), k, 1, opts...)
		}, func(k string) (*lock.Lease, error) {
			return c.TryAcquire(ctx(t, 10*time.Second), k, 1)
		})
	}
	if h.Caps().Reentry {
		add("named owner's hold", func(k string) (*lock.Lease, error) {
			return a.Lock(ctx(t, 10*time.Second), k, append(opts, lock.WithOwner("resume-"+strconv.Itoa(int(keySeq.Add(1)))))...)
		}, tryLock)
	}
	return gs
}

// assertExcluded checks that l (whose is "the first" or "the resumed"
// Lease of g's grant) is held and that the third Locker's attempt at g's
// key fails; after and cause describe the failure.
func (g kindGrant) assertExcluded(t *testing.T, l *lock.Lease, whose, after, cause string) {
	t.Helper()
	if closedWithin(l.Done(), 0) || time.Until(l.Deadline()) <= 0 {
		t.Fatalf("%s %s lease ended (%v): the test needs it held", whose, g.what, l.Err())
	}
	if other, err := g.try(); err == nil {
		other.Unlock(ctx(t, 10*time.Second))
		t.Errorf("%s: another Locker was granted the key after %s, while %s lease is held for %v more: %s",
			g.what, after, whose, time.Until(l.Deadline()).Round(time.Millisecond), cause)
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("%s: the third Locker's attempt: %v", g.what, err)
	}
}

// unlockAll unlocks the leases of gs and checks that their keys are left
// clean.
func unlockAll(t *testing.T, h Harness, gs []kindGrant) {
	t.Helper()
	for _, g := range gs {
		if err := g.lease.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Errorf("Unlock of the %s lease: %v", g.what, err)
		}
		assertNoResidue(t, h, g.key)
	}
}

// resumeEach resumes the grant of every lease of gs through b, with opts,
// and returns the resumed leases in the same order.
func resumeEach(t *testing.T, b *lock.Locker, gs []kindGrant, opts ...lock.Option) []*lock.Lease {
	t.Helper()
	resumed := make([]*lock.Lease, 0, len(gs))
	for _, g := range gs {
		r, err := b.Resume(ctx(t, 10*time.Second), g.lease.Handle(), opts...)
		if err != nil {
			t.Fatalf("Resume of the %s lease: %v", g.what, err)
		}
		resumed = append(resumed, r)
	}
	return resumed
}
