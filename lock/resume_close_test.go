package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// A Resume whose Locker is closed between the driver's Resume and the
// lease's registration fails with ErrClosed and changes nothing: the grant
// stays its first holder's (it used to be released by owner, so that
// another Locker was granted the key while the first lease was held).
func TestResumeRacingCloseKeepsGrant(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	opts := &lock.Options{TTL: 10 * time.Second, ReleaseTimeout: time.Second}
	a, b, c := memory.New(s, opts), memory.New(s, opts), memory.New(s, opts)
	defer a.Close()
	defer c.Close()
	la, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	lock.SetAfterResume(b, func() {
		go func() { closed <- b.Close() }()
		if !lock.WaitClosing(b) {
			t.Error("Close did not begin")
		}
	})
	lb, err := b.Resume(ctx, la.Handle())
	if lb != nil || !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Resume racing Close: lease %v, err %v; want nil and ErrClosed", lb != nil, err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if l, err := c.TryLock(ctx, "k"); err == nil {
		l.Unlock(ctx)
		t.Fatal("another Locker was granted the key while the first lease holds it: the failed Resume released its grant")
	} else if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock of the held key: %v, want ErrHeld", err)
	}
	if closedWithin(la.Done(), 0) {
		t.Fatalf("the first lease ended: %v", la.Err())
	}
	if err := la.Unlock(ctx); err != nil {
		t.Errorf("the first lease's Unlock: %v", err)
	}
}
