package memcached

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit41TryLockPausedServer: lock's outage rule says a Try call
// fails with ErrUnavailable within the client's own bound on a request to
// a dead server (a second or two) or its context: here with the server
// paused (SIGSTOP); and a waiting Lock ending meanwhile wraps
// ErrUnavailable.
func TestAudit41TryLockPausedServer(t *testing.T) {
	m := testserver.StartMemcached(t, nil)
	m.RequireFaults(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, "memcached://"+m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryLock(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	ls.Unlock(ctx)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	defer m.Resume()
	tctx, tcancel := context.WithTimeout(ctx, 25*time.Second)
	defer tcancel()
	start := time.Now()
	_, err = l.TryLock(tctx, "audit41-paused")
	took := time.Since(start)
	t.Logf("TryLock: %v after %v", err, took)
	if took > 6*time.Second || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryLock on a paused server: %v after %v; want ErrUnavailable within a few seconds", err, took)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	_, err = l.Lock(wctx, "audit41-paused")
	t.Logf("Lock: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Lock ending while the server is paused: %v; want DeadlineExceeded and ErrUnavailable", err)
	}
}
