package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// rwLockers returns n Lockers of h, or, when the driver grants no
// shared leases (Caps.Shared unset), checks that its Locker refuses them
// with ErrUnsupported and ends the test.
func rwLockers(t *testing.T, h Harness, n int) []*lock.Locker {
	t.Helper()
	if !h.Caps().Shared {
		l := h.NewLocker(t, nil)
		err := l.Supports(lock.SharedLeases)
		if !errors.Is(err, lock.ErrUnsupported) {
			t.Fatalf("Caps.Shared is unset but Supports(SharedLeases) = %v, want ErrUnsupported", err)
		}
		if _, err := l.TryRLock(ctx(t, 10*time.Second), key(t)); !errors.Is(err, lock.ErrUnsupported) {
			t.Fatalf("TryRLock on a driver without shared leases: err = %v, want ErrUnsupported", err)
		}
		t.Skip("the driver has no shared (read) leases")
	}
	var ls []*lock.Locker
	for range n {
		rw := h.NewLocker(t, nil)
		if err := rw.Supports(lock.SharedLeases); err != nil {
			t.Fatalf("Caps.Shared is set but: %v", err)
		}
		ls = append(ls, rw)
	}
	return ls
}

// Readers share a key; a writer cannot join them; tokens increase on both.
func testReadersShare(t *testing.T, h Harness) {
	ls := rwLockers(t, h, 3)
	k := key(t)
	r1, err := ls[0].RLock(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	r2, err := ls[1].TryRLock(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if r1.Token() == 0 || r2.Token() <= r1.Token() {
		t.Errorf("reader tokens %d then %d: want increasing", r1.Token(), r2.Token())
	}
	if _, err := ls[2].TryLock(ctx(t, 10*time.Second), k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("writer TryLock with readers in: err = %v, want ErrNotAcquired", err)
	}
	r1.Unlock(ctx(t, 10*time.Second))
	r2.Unlock(ctx(t, 10*time.Second))
	w, err := ls[2].TryLock(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("writer after readers left: %v", err)
	}
	if w.Token() <= r2.Token() {
		t.Errorf("writer token %d not greater than reader's %d", w.Token(), r2.Token())
	}
	w.Unlock(ctx(t, 10*time.Second))
	assertNoResidue(t, h, k)
}

// A writer excludes readers and writers.
func testWriterExcludes(t *testing.T, h Harness) {
	ls := rwLockers(t, h, 2)
	k := key(t)
	w := mustLock(t, ls[0], k)
	if _, err := ls[1].TryRLock(ctx(t, 10*time.Second), k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryRLock with a writer in: err = %v, want ErrNotAcquired", err)
	}
	if _, err := ls[1].TryLock(ctx(t, 10*time.Second), k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLock with a writer in: err = %v, want ErrNotAcquired", err)
	}
	w.Unlock(ctx(t, 10*time.Second))
	r, err := ls[1].RLock(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("RLock after the writer left: %v", err)
	}
	r.Unlock(ctx(t, 10*time.Second))
}

// A waiting writer is not starved by readers that come after it: they wait
// for it.
func testWriterNotStarved(t *testing.T, h Harness) {
	ls := rwLockers(t, h, 3)
	k := key(t)
	r1, err := ls[0].RLock(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	order := make(chan string, 2)
	wDone := make(chan struct{})
	go func() {
		w, err := ls[1].Lock(ctx(t, 30*time.Second), k)
		if err != nil {
			t.Errorf("writer: %v", err)
			close(wDone)
			return
		}
		order <- "writer"
		time.Sleep(100 * time.Millisecond)
		w.Unlock(ctx(t, 10*time.Second))
		close(wDone)
	}()
	time.Sleep(300 * time.Millisecond) // the writer is waiting
	if _, err := ls[2].TryRLock(ctx(t, 10*time.Second), k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("a reader arriving after a waiting writer got in: err = %v", err)
	}
	rDone := make(chan struct{})
	go func() {
		defer close(rDone)
		r2, err := ls[2].RLock(ctx(t, 30*time.Second), k)
		if err != nil {
			t.Errorf("late reader: %v", err)
			return
		}
		order <- "late reader"
		r2.Unlock(ctx(t, 10*time.Second))
	}()
	time.Sleep(200 * time.Millisecond)
	r1.Unlock(ctx(t, 10*time.Second))
	<-wDone
	<-rDone
	close(order)
	var got []string
	for s := range order {
		got = append(got, s)
	}
	if len(got) != 2 || got[0] != "writer" {
		t.Errorf("grant order %q; want the writer before the late reader", got)
	}
}
