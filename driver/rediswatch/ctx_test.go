package rediswatch

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
)

// pastDeadline is a context whose deadline has passed but whose timer has
// not fired yet: what a caller sees for a moment after a socket deadline
// taken from the context expired.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// expired is a context whose deadline passed a moment ago; its timer may or
// may not have fired.
func expired(t *testing.T) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Microsecond))
	t.Cleanup(cancel)
	time.Sleep(time.Microsecond)
	return ctx
}

// A network timeout at the context's deadline wraps the context's error,
// even before ctx.Err() is set (and waits until it is); one before it is
// marked driver.ErrUnavailable; other errors and the driver's sentinels
// are left alone.
func TestWithCtx(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	other := errors.New("boom")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want error // nil: err unchanged
	}{
		{"timeout at the deadline", pastDeadline{context.Background()}, timeout, context.DeadlineExceeded},
		{"timeout at a real deadline", expired(t), timeout, context.DeadlineExceeded},
		{"timeout without a deadline", context.Background(), timeout, driver.ErrUnavailable},
		{"other error at the deadline", pastDeadline{context.Background()}, other, nil},
		{"any error after cancel", cancelled, other, context.Canceled},
		{"held after cancel", cancelled, &driver.HeldError{}, nil},
		{"not held after cancel", cancelled, driver.ErrNotHeld, nil},
	} {
		got := redisx.WithCtx(tc.ctx, tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: %v does not wrap %v", tc.name, got, tc.err)
		}
		if tc.want != nil && !errors.Is(got, tc.want) {
			t.Errorf("%s: %v does not wrap %v", tc.name, got, tc.want)
		}
		if tc.want == nil && got != tc.err {
			t.Errorf("%s: got %v, want %v unchanged", tc.name, got, tc.err)
		}
	}
}
