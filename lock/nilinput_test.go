package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// Every call of the public API given a nil or zero context, Locker, func,
// Lease, handle, option or strategy returns an error wrapping ErrInvalid,
// and none panics.
func TestNilInputsInvalid(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	s := memory.NewStore()
	l := memory.New(s, &lock.Options{ReleaseTimeout: time.Second})
	defer l.Close()
	rw, sem := l, l
	held, err := l.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	var nilLease *lock.Lease
	var nilLocker *lock.Locker
	zero := &lock.Lease{}
	fn := func(context.Context) error { return nil }
	lease := func(_ *lock.Lease, err error) error { return err }
	keyState := func(_ *lock.KeyState, err error) error { return err }
	locker := func(_ *lock.Locker, err error) error { return err }
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Lock(nil ctx)", func() error { return lease(l.Lock(nilCtx, "k")) }},
		{"TryLock(nil ctx)", func() error { return lease(l.TryLock(nilCtx, "k")) }},
		{"RLock(nil ctx)", func() error { return lease(rw.RLock(nilCtx, "k")) }},
		{"TryRLock(nil ctx)", func() error { return lease(rw.TryRLock(nilCtx, "k")) }},
		{"Acquire(nil ctx)", func() error { return lease(sem.Acquire(nilCtx, "k", 2)) }},
		{"TryAcquire(nil ctx)", func() error { return lease(sem.TryAcquire(nilCtx, "k", 2)) }},
		{"Acquire(limit 0)", func() error { return lease(sem.Acquire(ctx, "k", 0)) }},
		{"Resume(nil ctx)", func() error { return lease(l.Resume(nilCtx, held.Handle())) }},
		{`Resume("")`, func() error { return lease(l.Resume(ctx, "")) }},
		{`Lock("")`, func() error { return lease(l.Lock(ctx, "")) }},
		{"Lock(nil Option)", func() error { return lease(l.Lock(ctx, "k", nil)) }},
		{"Lock(WithTTL(-1s))", func() error { return lease(l.Lock(ctx, "k", lock.WithTTL(-time.Second))) }},
		{"Lock(WithRetry(nil))", func() error { return lease(l.Lock(ctx, "k", lock.WithRetry(nil))) }},
		{"Lock(WithRetry(LimitRetry(nil)))", func() error {
			return lease(l.Lock(ctx, "held", lock.WithRetry(lock.LimitRetry(nil, 3))))
		}},
		{"Lock(WithRetry(nil Backoff))", func() error {
			return lease(l.Lock(ctx, "held", lock.WithRetry(nilBackoff{})))
		}},
		{`Lock(WithOwner(""))`, func() error { return lease(l.Lock(ctx, "k", lock.WithOwner(""))) }},
		{"New(Options.Retry LimitRetry(nil))", func() error {
			o := memory.New(s, &lock.Options{Retry: lock.LimitRetry(nil, 1)})
			defer o.Close()
			return lease(o.TryLock(ctx, "k"))
		}},
		{"New(nil driver)", func() error {
			o := lock.New(nil, nil)
			if err := o.Close(); err != nil {
				return fmt.Errorf("Close: %w", err)
			}
			return lease(o.TryLock(ctx, "k"))
		}},
		{"Do(nil ctx)", func() error { return l.Do(nilCtx, "k", fn) }},
		{"nil Locker: Do", func() error { return nilLocker.Do(ctx, "k", fn) }},
		{"nil Locker: Lock", func() error { return lease(nilLocker.Lock(ctx, "k")) }},
		{"nil Locker: TryAcquire", func() error { return lease(nilLocker.TryAcquire(ctx, "k", 2)) }},
		{"nil Locker: Resume", func() error { return lease(nilLocker.Resume(ctx, held.Handle())) }},
		{"nil Locker: Supports", func() error { return nilLocker.Supports(lock.SharedLeases) }},
		{"nil Locker: Close", func() error { return nilLocker.Close() }},
		{"Do(nil fn)", func() error { return l.Do(ctx, "k", nil) }},
		{"Inspect(nil ctx)", func() error { return keyState(l.Inspect(nilCtx, "k")) }},
		{"nil Locker: Inspect", func() error { return keyState(nilLocker.Inspect(ctx, "k")) }},
		{"Open(nil ctx)", func() error { return locker(lock.Open(nilCtx, "memory://")) }},
		{"OpenWith(nil ctx)", func() error { return locker(lock.OpenWith(nilCtx, "memory://", nil)) }},
		{`Open("")`, func() error { return locker(lock.Open(ctx, "")) }},
		{"URLOptions(nil)", func() error { _, _, err := lock.URLOptions(nil); return err }},
		{"nil Lease: Unlock", func() error { return nilLease.Unlock(ctx) }},
		{"nil Lease: Refresh", func() error { return nilLease.Refresh(ctx, time.Second) }},
		{"nil Lease: Detach", func() error { _, err := nilLease.Detach(); return err }},
		{"nil Lease: Err", func() error { return accessors(nilLease) }},
		{"zero Lease: Unlock", func() error { return zero.Unlock(ctx) }},
		{"zero Lease: Refresh", func() error { return zero.Refresh(ctx, time.Second) }},
		{"zero Lease: Detach", func() error { _, err := zero.Detach(); return err }},
		{"zero Lease: Err", func() error { return accessors(zero) }},
		{"Refresh(nil ctx)", func() error { return held.Refresh(nilCtx, time.Second) }},
		{"Refresh(ttl -1s)", func() error { return held.Refresh(ctx, -time.Second) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panicked: %v", p)
				}
			}()
			if err := c.call(); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
	// The refused calls on the held lease left it held, and the other
	// nil-safe functions answer without a panic.
	if isClosed(held.Done()) {
		t.Fatalf("the lease ended: %v", held.Err())
	}
	var st *lock.KeyState
	if st.Held() || nilLocker.As(new(int)) || l.As(nil) {
		t.Error("a nil KeyState is held, or As succeeded without a Locker or target")
	}
}

// accessors calls every accessor of a nil or zero Lease, which must answer
// zero values (Done closed) and an Err wrapping ErrInvalid.
func accessors(l *lock.Lease) error {
	if l.Key() != "" || l.Token() != 0 || l.Limit() != 0 || l.TTL() != 0 || l.Validity() != 0 || !l.Deadline().IsZero() || l.Handle() != "" || !isClosed(l.Done()) {
		return errors.New("an accessor of a Lease that was never granted answered more than zero, or Done is open")
	}
	return l.Err()
}

type nilBackoff struct{}

func (nilBackoff) NewBackoff() lock.Backoff { return nil }

// Unlock with a nil context returns ErrInvalid, and the lease ends all the
// same: Done closes and its grant is released in the background (it used
// to panic, leaving the lease held and renewed).
func TestUnlockNilContext(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memory.New(s, nil), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	l, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Unlock(nil) panicked: %v", p)
			}
		}()
		//lint:ignore SA1012 the nil context is the point
		if err := l.Unlock(nil); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Unlock(nil): %v, want ErrInvalid", err)
		}
	}()
	if !isClosed(l.Done()) || !errors.Is(l.Err(), lock.ErrNotHeld) {
		t.Errorf("after Unlock(nil): Done closed %v, Err %v; want closed, ErrNotHeld (released)", isClosed(l.Done()), l.Err())
	}
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m, err := b.TryLock(ctx, "k")
		if err == nil {
			m.Unlock(ctx)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the grant was not released after Unlock(nil): %v", err)
		}
	}
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("a second Unlock: %v, want ErrNotHeld", err)
	}
}

// isClosed reports whether c is closed now.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
