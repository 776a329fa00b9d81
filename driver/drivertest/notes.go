package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// notesOrSkip returns when h's driver stores notes (Caps.Notes); when it
// does not, it checks that Supports(lock.Notes) and a TryLock with a note
// refuse with lock.ErrUnsupported, and skips with the driver's reason.
func notesOrSkip(t *testing.T, h Harness) {
	t.Helper()
	l := h.NewLocker(t, nil)
	err := l.Supports(lock.Notes)
	if h.Caps().Notes {
		if err != nil {
			t.Fatalf("the harness says the driver stores notes; Supports(Notes): %v", err)
		}
		return
	}
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("Supports(Notes) on a driver without notes: %v; want ErrUnsupported", err)
	}
	if lease, err := l.TryLock(ctx(t, 10*time.Second), key(t), lock.WithNote("n")); !errors.Is(err, lock.ErrUnsupported) {
		if lease != nil {
			lease.Unlock(ctx(t, 10*time.Second))
		}
		t.Fatalf("TryLock with a note on a driver without notes: %v; want ErrUnsupported", err)
	}
	t.Skipf("refused as it should be: %v", err)
}

// Inspect/Notes: a grant's note, from TryLock or from a queued Lock, is
// what Inspect shows while the grant lives, renewal included.
func testInspectNotes(t *testing.T, h Harness) {
	notesOrSkip(t, h)
	ic := inspectCaps(t, h)
	holder, waiter, viewer := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	first := mustLock(t, holder, k, lock.WithNote("first host:1 ✓"))
	checkNote := func(lease *lock.Lease, want string) {
		t.Helper()
		st := inspect(t, viewer, ic, k)
		if len(st.Holders) != 1 || st.Holders[0].Owner != ownerOf(t, lease) || st.Holders[0].Note != want {
			t.Fatalf("holders %+v; want the one holder with note %q", st.Holders, want)
		}
	}
	checkNote(first, "first host:1 ✓")
	if err := first.Refresh(ctx(t, 10*time.Second), 0); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	checkNote(first, "first host:1 ✓")

	got := make(chan *lock.Lease, 1)
	go func() {
		lease, err := waiter.Lock(ctx(t, 60*time.Second), k, lock.WithNote("second"))
		if err != nil {
			t.Errorf("the waiter's Lock: %v", err)
		}
		got <- lease
	}()
	time.Sleep(100 * time.Millisecond) // let it wait, in the queue where there is one
	if err := first.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	second := <-got
	if second == nil {
		return
	}
	checkNote(second, "second")
	if err := second.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	assertNoResidue(t, h, k)
}
