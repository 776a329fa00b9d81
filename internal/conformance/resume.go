package conformance

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
