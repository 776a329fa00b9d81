package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestCleanUpWarnings: the clean-up after an attempt whose outcome is
// unknown is made whatever the attempt's error; its failure is a warning
// ("the key is freed by its TTL") only when the attempt may have reached
// the backend. An attempt that could not connect, or that the backend
// turned away as it turns away the clean-up (a wrong password), has left
// nothing: a warning would be false, and the caller has the error.
func TestCleanUpWarnings(t *testing.T) {
	refused := func(op string) error {
		return fmt.Errorf("fake: %s: %w", op, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	}
	reset := func(op string) error {
		return fmt.Errorf("fake: %s: %w", op, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
	}
	wrongPass := errors.New("WRONGPASS invalid username-password pair or user is disabled.")
	for _, tc := range []struct {
		name        string
		attempt     func() error
		cleanUp     func() error // the release's, and the queue's leave
		wantWarning bool
	}{
		{"refused", func() error { return refused("grant") }, func() error { return refused("release") }, false},
		{"refused, then cut short", func() error { return refused("grant") }, func() error { return fmt.Errorf("fake: release: %w", os.ErrDeadlineExceeded) }, false},
		{"wrong password", func() error { return fmt.Errorf("fake: grant: %w", wrongPass) }, func() error { return fmt.Errorf("fake: release: %w", wrongPass) }, false},
		{"lost reply, then cut short", func() error { return errLostReply }, func() error { return fmt.Errorf("fake: release: %w", os.ErrDeadlineExceeded) }, true},
		{"reset", func() error { return reset("grant") }, func() error { return reset("release") }, true},
		{"timeout", func() error { return fmt.Errorf("fake: grant: %w", os.ErrDeadlineExceeded) }, func() error { return fmt.Errorf("fake: release: %w", os.ErrDeadlineExceeded) }, true},
		{"wrong password, then a broken connection", func() error { return wrongPass }, func() error { return errLostReply }, true},
	} {
		for _, queued := range []bool{false, true} {
			name := tc.name + ", TryLock's release"
			if queued {
				name = tc.name + ", a queued Lock's leave"
			}
			t.Run(name, func(t *testing.T) {
				var logged syncLog
				f := newFake()
				f.setFaults(func(x *faults) { x.acquireErr, x.releaseErr, x.leaveErr = tc.attempt, tc.cleanUp, tc.cleanUp })
				o := &lock.Options{ReleaseTimeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))}
				var l *lock.Locker
				var err error
				if queued {
					var waits atomic.Int64
					l = lock.New(queuingFake{f, &waits}, o)
					_, err = l.Lock(bg(t), "k")
				} else {
					l = lock.New(f, o)
					_, err = l.TryLock(bg(t), "k")
				}
				if err == nil || errors.Is(err, lock.ErrHeld) {
					t.Fatalf("attempt: %v; want the backend's error", err)
				}
				l.Close() // waits for the clean-up, up to ReleaseTimeout
				if !queued && f.releases.Load() == 0 {
					t.Errorf("no clean-up release was made")
				}
				out := logged.String()
				warned := strings.Contains(out, "level=WARN")
				if warned != tc.wantWarning {
					t.Errorf("a warning logged: %v, want %v; the log:\n%s", warned, tc.wantWarning, out)
				}
				if !tc.wantWarning && !strings.Contains(out, "level=DEBUG") {
					t.Errorf("the failed clean-up is not logged at debug level; the log:\n%s", out)
				}
			})
		}
	}
}

// TestCleanUpWarningsAbandoned: the same for an attempt that the caller's
// context abandoned and that then failed to connect: its clean-up's
// failure is no warning either.
func TestCleanUpWarningsAbandoned(t *testing.T) {
	refused := func() error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	for _, queued := range []bool{false, true} {
		var logged syncLog
		f := newFake()
		f.setFaults(func(x *faults) {
			x.acquireSlow = 100 * time.Millisecond
			x.acquireErr, x.releaseErr, x.leaveErr = refused, refused, refused
		})
		o := &lock.Options{ReleaseTimeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		var l *lock.Locker = lock.New(f, o)
		if queued {
			var waits atomic.Int64
			l = lock.New(queuingFake{f, &waits}, o)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if _, err := l.Lock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("queued %v: %v; want the context's end", queued, err)
		}
		cancel()
		time.Sleep(150 * time.Millisecond) // the attempt fails, and its clean-up begins
		l.Close()
		if out := logged.String(); strings.Contains(out, "level=WARN") || !strings.Contains(out, "level=DEBUG") {
			t.Errorf("queued %v: the log:\n%s\nwant the failed clean-up at debug level, no warning", queued, out)
		}
	}
}
