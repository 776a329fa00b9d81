package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// Supports tells what the driver's Caps say, and every call that needs
// what the driver lacks is refused the same way, before any I/O: with
// ErrUnsupported (and ErrInvalid, as before), naming the driver and, where
// it gave one, its reason.
func TestSupportsByCapability(t *testing.T) {
	plain := lock.New(newFake(), nil)
	defer plain.Close()
	for _, c := range []lock.Capability{lock.SharedLeases, lock.Permits, lock.Reentry, lock.Resume, lock.Inspect} {
		err := plain.Supports(c)
		if !errors.Is(err, lock.ErrUnsupported) || !errors.Is(err, lock.ErrInvalid) || !errors.Is(err, errors.ErrUnsupported) ||
			!strings.Contains(err.Error(), "lock_test") {
			t.Errorf("Supports(%v) of a driver without Caps: %v, want ErrUnsupported naming the driver", c, err)
		}
	}
	refusing := lock.New(&capsFake{fake: newFake(), caps: driver.Caps{Name: "refuser", Permits: driver.No("not here, because")}}, nil)
	defer refusing.Close()
	ctx := context.Background()
	calls := map[string]error{
		"Supports": refusing.Supports(lock.Permits),
	}
	_, calls["Acquire"] = refusing.Acquire(ctx, "k", 2)
	_, calls["TryAcquire"] = refusing.TryAcquire(ctx, "k", 2)
	for name, err := range calls {
		if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "refuser: not here, because") {
			t.Errorf("%s on a driver refusing permits: %v, want ErrUnsupported with its name and reason", name, err)
		}
	}
	_, err := refusing.TryRLock(ctx, "k")
	if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "the refuser driver does not declare shared leases") {
		t.Errorf("TryRLock on a driver whose Caps leave Shared unset: %v", err)
	}
	_, err = refusing.Resume(ctx, "dlock1.p2.0123456789abcdef0123456789abcdef.12.a2V5")
	if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "the refuser driver does not declare resuming leases") {
		t.Errorf("Resume on a driver whose Caps leave Resume unset: %v", err)
	}
	_, err = refusing.Lock(ctx, "k", lock.WithOwner("job"))
	if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "re-entry") {
		t.Errorf("Lock WithOwner on a driver whose Caps leave Reentry unset: %v", err)
	}
	granting := lock.New(&capsFake{fake: newFake(), caps: driver.Caps{Permits: driver.Yes}}, nil)
	defer granting.Close()
	if err := granting.Supports(lock.Permits); err != nil {
		t.Errorf("Supports(Permits) of a granting driver: %v", err)
	}
	if err := granting.Supports(lock.SharedLeases); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Supports(SharedLeases) of a driver that shares nothing: %v", err)
	}
	if n := plain.Supports(lock.Capability(99)); n == nil {
		t.Error("Supports of an unknown capability: nil")
	}
}

// capsFake is the fake with the Caps the test gives.
type capsFake struct {
	*fake
	caps driver.Caps
}

func (c *capsFake) Capabilities() driver.Caps { return c.caps }

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

func (r *resumingFake) Capabilities() driver.Caps { return driver.Caps{Resume: driver.Yes} }

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
