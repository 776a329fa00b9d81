package redisnx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit41LockOutageErrorSaysUnavailable: lock's outage rule says a
// waiting call whose context ends during an outage returns an error
// wrapping ErrNotAcquired, the context's error and ErrUnavailable with
// the backend's last error; and the call returns promptly at its end.
func TestAudit41LockOutageErrorSaysUnavailable(t *testing.T) {
	r := testserver.StartRedis(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, "redisnx://"+r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.Lock(ctx, "audit41-outage-err")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	_, err = l.Lock(wctx, "audit41-outage-err")
	late := time.Since(func() time.Time { d, _ := wctx.Deadline(); return d }())
	t.Logf("Lock: %v (%v after its deadline)", err, late)
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Lock whose context ends while the server is down: %v; want ErrNotAcquired, DeadlineExceeded and ErrUnavailable", err)
	}
	if late > time.Second {
		t.Errorf("Lock returned %v after its context's deadline", late)
	}
}
