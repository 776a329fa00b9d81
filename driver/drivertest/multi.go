package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// setKeys returns n keys of one set, in sorted order (a, b, c, ...).
func setKeys(t *testing.T, n int) []string {
	base := key(t)
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s/%c", base, 'a'+i)
	}
	return ks
}

// Multi: a set overlapping a held key is not taken, by TryLockMany nor by
// a LockMany that runs out of time, and none of it is left held; once
// the key is free the whole set is taken, with a token per key.
func testMultiAllOrNothing(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	ks := setKeys(t, 3)
	held := mustLock(t, a, ks[1])
	_, err := b.TryLockMany(ctx(t, 10*time.Second), []string{ks[2], ks[1], ks[0]})
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryLockMany over a held key: err = %v, want ErrNotAcquired and ErrHeld", err)
	}
	assertNoneHeld(t, h, a, ks[0], ks[2])
	c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := b.LockMany(c, ks); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("LockMany over a held key: err = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	assertNoneHeld(t, h, a, ks[0], ks[2])
	if err := held.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	m, err := b.TryLockMany(ctx(t, 10*time.Second), []string{ks[2], ks[0], ks[1]})
	if err != nil {
		t.Fatalf("TryLockMany of a free set: %v", err)
	}
	t.Logf("taken in one step: %v", m.Atomic())
	if got := m.Keys(); fmt.Sprint(got) != fmt.Sprint(ks) {
		t.Errorf("Keys() = %q, want %q (sorted)", got, ks)
	}
	for i, k := range ks {
		tok, ok := m.Token(k)
		if !ok || tok == 0 || tok != m.Leases()[i].Token() {
			t.Errorf("Token(%q) = %d, %v; its lease's is %d", k, tok, ok, m.Leases()[i].Token())
		}
		assertHeld(t, a, k, "a member of the set")
	}
	if tok, ok := m.Token(ks[0] + "/other"); ok || tok != 0 {
		t.Errorf("Token of a key not in the set = %d, %v, want 0, false", tok, ok)
	}
	if err := m.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// assertNoneHeld fails unless every key of ks is free (through l) and has
// no state left on the backend.
func assertNoneHeld(t *testing.T, h Harness, l *lock.Locker, ks ...string) {
	t.Helper()
	for _, k := range ks {
		assertNoResidue(t, h, k)
		assertFree(t, l, k, "a key of a set not taken")
	}
}

// Multi: lockers of overlapping sets, given in opposite orders, never
// deadlock: all of them finish every round, and no key is ever held by
// two of them at once.
func testMultiOppositeOrders(t *testing.T, h Harness) {
	ks := setKeys(t, 4)
	sets := [][]string{
		{ks[0], ks[1], ks[2]},
		{ks[2], ks[1], ks[0]},
		{ks[3], ks[1]},
		{ks[1], ks[3], ks[0]},
	}
	var inUse [4]atomic.Int32
	index := map[string]int{ks[0]: 0, ks[1]: 1, ks[2]: 2, ks[3]: 3}
	c := ctx(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, len(sets))
	for _, set := range sets {
		l := h.NewLocker(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 5 {
				m, err := l.LockMany(c, set)
				if err != nil {
					errs <- fmt.Errorf("round %d of %q: %w", round, set, err)
					return
				}
				for _, k := range set {
					if inUse[index[k]].Add(1) != 1 {
						errs <- fmt.Errorf("%q held by two sets at once", k)
					}
				}
				time.Sleep(10 * time.Millisecond)
				for _, k := range set {
					inUse[index[k]].Add(-1)
				}
				if err := m.Unlock(c); err != nil {
					errs <- fmt.Errorf("unlock: %w", err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("overlapping sets (a deadlock runs out the 60s context): %v", err)
	}
}

// Multi: Done closes when one member is lost (its grant deleted behind
// the holder's back), Err says ErrLost, and Unlock then releases the
// others.
func testMultiDoneOnLoss(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	a, b := h.NewLocker(t, &lock.Options{TTL: ttl}), h.NewLocker(t, nil)
	ks := setKeys(t, 3)
	m, err := a.LockMany(ctx(t, 10*time.Second), ks)
	if err != nil {
		t.Fatalf("LockMany: %v", err)
	}
	if err := h.DeleteKey(ctx(t, 10*time.Second), ks[1]); err != nil {
		t.Fatalf("DeleteKey: %v", err)
	}
	bound := ttl/3 + 3*time.Second // as C6/DoneOnDelete's
	if !closedBy(t, m.Done(), bound) {
		t.Fatalf("Done still open %v after a member's grant was deleted", bound)
	}
	if err := m.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", err)
	}
	if err := m.Unlock(ctx(t, 10*time.Second)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock after a member was lost: err = %v, want ErrNotHeld (of the lost member)", err)
	}
	assertNoneHeld(t, h, b, ks...)
}

// Multi: Unlock releases every member: Done closes, and each key is free
// with nothing left on the backend.
func testMultiUnlockReleasesAll(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	ks := setKeys(t, 3)
	m, err := a.LockMany(ctx(t, 10*time.Second), ks)
	if err != nil {
		t.Fatalf("LockMany: %v", err)
	}
	select {
	case <-m.Done():
		t.Fatalf("Done closed while held: %v", m.Err())
	default:
	}
	if err := m.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !closedWithin(m.Done(), time.Second) || m.Err() == nil {
		t.Errorf("after Unlock: Done not closed or Err nil (%v)", m.Err())
	}
	assertNoneHeld(t, h, b, ks...)
}

// Multi: a LockMany cancelled while it waits for the last key of its set
// (the others taken) returns with the context's error and leaves none of
// the set held nor queued.
func testMultiCancelMidway(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	ks := setKeys(t, 3)
	held := mustLock(t, a, ks[2]) // the last in sorted order
	c, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	ends := newCanary(start.Add(500 * time.Millisecond))
	_, err := b.LockMany(c, ks)
	cancel()
	checkBy(t, ends, time.Now(), time.Second, "LockMany returned %v after its context was cancelled at 500ms", time.Since(start))
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled LockMany: err = %v, want ErrNotAcquired and Canceled", err)
	}
	assertNoneHeld(t, h, a, ks[0], ks[1])
	assertHeld(t, b, ks[2], "the other owner's grant")
	if err := held.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	assertNoResidue(t, h, ks[2])
}

// Multi: bad input is ErrInvalid, without a panic and before any I/O.
func testMultiInvalidInput(t *testing.T, h Harness) {
	l := h.NewLocker(t, nil)
	k := key(t)
	many := make([]string, lock.MaxKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("%s/%d", k, i)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		keys []string
		opts []lock.Option
	}{
		{"nil ctx", nil, []string{k}, nil},
		{"no keys", context.Background(), nil, nil},
		{"empty set", context.Background(), []string{}, nil},
		{"duplicate", context.Background(), []string{k + "/a", k + "/b", k + "/a"}, nil},
		{"too many", context.Background(), many, nil},
		{"empty key", context.Background(), []string{k, ""}, nil},
		{"nil option", context.Background(), []string{k}, []lock.Option{nil}},
	} {
		for name, f := range map[string]func(context.Context, []string, ...lock.Option) (*lock.MultiLease, error){
			"LockMany": l.LockMany, "TryLockMany": l.TryLockMany,
		} {
			m, err := f(tc.ctx, tc.keys, tc.opts...)
			if m != nil || !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("%s, %s: got %v, %v; want nil and ErrInvalid", name, tc.name, m, err)
			}
		}
	}
	assertNoResidue(t, h, k)
	assertNoResidue(t, h, k+"/a")
	var m *lock.MultiLease
	if err := m.Unlock(context.Background()); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("nil MultiLease's Unlock: %v, want ErrInvalid", err)
	}
	if !closedWithin(m.Done(), 0) || !errors.Is(m.Err(), lock.ErrInvalid) || m.Keys() != nil || m.Atomic() {
		t.Errorf("nil MultiLease: Done open, or Err %v not ErrInvalid, or Keys/Atomic set", m.Err())
	}
}
