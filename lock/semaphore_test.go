package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// A Locker is a SemLocker exactly when its driver grants permits;
// Semaphores says why not otherwise, and a SemLocker whose driver also
// shares is an RWLocker too.
func TestSemaphoresByCapability(t *testing.T) {
	plain := lock.New(newFake(), nil)
	defer plain.Close()
	if _, ok := plain.(lock.SemLocker); ok {
		t.Fatal("a Locker over a driver without Semaphorer is a SemLocker")
	}
	if _, err := lock.Semaphores(plain); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "no semaphore permits") {
		t.Errorf("Semaphores of a Locker without permits: %v, want ErrInvalid with the reason", err)
	}
	refusing := lock.New(&semFake{fake: newFake(), err: fmt.Errorf("%w: not here, because", driver.ErrInvalid)}, nil)
	defer refusing.Close()
	if _, err := lock.Semaphores(refusing); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "not here, because") {
		t.Errorf("Semaphores of a refusing driver: %v, want ErrInvalid with its reason", err)
	}
	granting := lock.New(&semFake{fake: newFake()}, nil)
	defer granting.Close()
	if _, err := lock.Semaphores(granting); err != nil {
		t.Errorf("Semaphores of a granting driver: %v", err)
	}
	if _, ok := granting.(lock.RWLocker); ok {
		t.Error("a driver that shares nothing gave an RWLocker")
	}
}

type semFake struct {
	*fake
	err error
}

func (s *semFake) Semaphores() error { return s.err }

// resumingFake resumes a grant as a refresh that reaches the backend
// delay late (a server paused under the call: applied when it wakes, the
// reply at once), or, with replyLate, is applied at once and answered
// delay late: either way the call returns after the validity it counts on
// from its start has passed.
type resumingFake struct {
	*fake
	delay     time.Duration
	replyLate bool
}

func (r *resumingFake) Resumable() error { return nil }

func (r *resumingFake) Resume(ctx context.Context, l *driver.Lease) error {
	if !r.replyLate {
		time.Sleep(r.delay)
	}
	v, err := r.fake.Refresh(ctx, l, l.TTL)
	if err != nil {
		return err
	}
	if r.replyLate {
		time.Sleep(r.delay)
	}
	l.Validity = v
	return nil
}

// A Resume whose reply comes after its validity passed never returns a
// lease past its deadline: the grant is refreshed first, as a late grant
// is (the nemesis caught a resumed lease returned 517ms past its deadline
// with Done open, behind a paused server).
func TestResumeLateReplyRevived(t *testing.T) {
	t.Run("applied late", func(t *testing.T) { testResumeLate(t, false) })
	t.Run("answered late", func(t *testing.T) { testResumeLate(t, true) })
}

func testResumeLate(t *testing.T, replyLate bool) {
	ctx := context.Background()
	f := &resumingFake{fake: newFake(), delay: 400 * time.Millisecond, replyLate: replyLate}
	a := lock.New(f, &lock.Options{TTL: 2 * time.Second})
	defer a.Close()
	b := lock.New(f, &lock.Options{TTL: 300 * time.Millisecond})
	defer b.Close()
	lease, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	h, err := lease.Detach()
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Resume(ctx, h)
	if replyLate {
		// The grant expired on the backend while the reply was late: the
		// revival finds it gone, and no lease is returned.
		if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Resume of a grant that expired under a late reply: lease %v, err %v; want no lease, ErrNotAcquired and ErrNotHeld", r != nil, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	defer r.Unlock(ctx)
	select {
	case <-r.Done():
		t.Fatalf("the resumed lease came back ended: %v", r.Err())
	default:
	}
	if left := time.Until(r.Deadline()); left <= 0 {
		t.Fatalf("Resume returned a lease %v past its deadline with Done open", -left)
	}
}
