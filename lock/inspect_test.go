package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// inspecting is the fake with a driver.Inspector whose answer the test
// gives, counting the calls that reach it.
type inspecting struct {
	*fake
	calls   atomic.Int64
	inspect func(ctx context.Context, key string) (driver.KeyState, error)
}

func (d *inspecting) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	d.calls.Add(1)
	return d.inspect(ctx, key)
}

// A driver without driver.Inspector is refused with ErrUnsupported and a
// reason; a bad key with ErrInvalid, before any I/O.
func TestInspectRefused(t *testing.T) {
	l := lock.New(newFake(), nil)
	defer l.Close()
	_, err := l.Inspect(context.Background(), "k")
	if !errors.Is(err, lock.ErrUnsupported) || !strings.Contains(err.Error(), "cannot tell who holds a key") {
		t.Errorf("Inspect on a driver without Inspector: %v; want ErrUnsupported saying it cannot tell", err)
	}

	d := &inspecting{fake: newFake(), inspect: func(context.Context, string) (driver.KeyState, error) { return driver.KeyState{}, nil }}
	li := lock.New(d, nil)
	defer li.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, key := range []string{"", strings.Repeat("k", lock.MaxKeyLen+1), "bad\xffkey"} {
		_, err := li.Inspect(cancelled, key)
		if !errors.Is(err, lock.ErrInvalid) || errors.Is(err, context.Canceled) {
			t.Errorf("Inspect(%.20q): %v; want ErrInvalid before the context is looked at", key, err)
		}
	}
	if n := d.calls.Load(); n != 0 {
		t.Errorf("the driver was called %d times for invalid keys", n)
	}
	bad := lock.New(d, &lock.Options{TTL: time.Nanosecond})
	defer bad.Close()
	if _, err := bad.Inspect(context.Background(), "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Inspect through a Locker with invalid options: %v; want ErrInvalid", err)
	}
	li.Close()
	if _, err := li.Inspect(context.Background(), "k"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Inspect after Close: %v; want ErrClosed", err)
	}
}

// The driver's answer reaches the caller with a named owner shown by its
// name's digits; errors are wrapped with the key; a call stuck in the
// driver returns when its context ends.
func TestInspectResult(t *testing.T) {
	owner := lock.Owner("release-7") + "0123456789abcdef"
	since := time.Now().Add(-time.Minute)
	var answer func(ctx context.Context) (driver.KeyState, error)
	d := &inspecting{fake: newFake(), inspect: func(ctx context.Context, key string) (driver.KeyState, error) { return answer(ctx) }}
	l := lock.New(d, nil)
	defer l.Close()

	answer = func(context.Context) (driver.KeyState, error) {
		return driver.KeyState{
			Holders: []driver.Holder{{Owner: owner, Holds: 2, Token: 7, Remaining: time.Second, Since: since}},
			Waiters: []driver.Waiter{{Owner: strings.Repeat("a", 32), Mode: driver.Permit, Limit: 3}},
			Unknown: driver.Unknown{Since: true},
		}, nil
	}
	st, err := l.Inspect(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	want := lock.Holder{Owner: lock.Owner("release-7"), Holds: 2, Mode: lock.Exclusive, Token: 7, Remaining: time.Second, Since: since}
	if !st.Held() || len(st.Holders) != 1 || st.Holders[0] != want || st.Key != "k" {
		t.Errorf("holders %+v (key %q); want [%+v]", st.Holders, st.Key, want)
	}
	if len(st.Waiters) != 1 || st.Waiters[0].Mode != lock.Permit || st.Waiters[0].Limit != 3 || !st.Unknown.Since || st.Unknown.Waiters {
		t.Errorf("waiters %+v, unknown %+v", st.Waiters, st.Unknown)
	}
	if len(lock.Owner("release-7")) != driver.NamedOwnerLen || lock.Owner("release-7") == lock.Owner("release-8") {
		t.Errorf("NamedOwner: %q, %q", lock.Owner("release-7"), lock.Owner("release-8"))
	}

	boom := errors.New("connection reset")
	answer = func(context.Context) (driver.KeyState, error) { return driver.KeyState{}, boom }
	if _, err := l.Inspect(context.Background(), "k"); !errors.Is(err, boom) || errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("a backend failure: %v; want it wrapped with the key", err)
	}
	answer = func(context.Context) (driver.KeyState, error) {
		return driver.KeyState{}, errors.Join(driver.ErrInvalid, errors.New("no such thing"))
	}
	if _, err := l.Inspect(context.Background(), "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("a driver's refusal: %v; want ErrInvalid", err)
	}

	stuck := make(chan struct{})
	defer close(stuck)
	answer = func(context.Context) (driver.KeyState, error) { <-stuck; return driver.KeyState{}, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.Inspect(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a stuck Inspect: %v; want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a stuck Inspect returned %v after its context ended", took)
	}
}
