package zookeeper

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit41TryLockPausedServer: lock's outage rule says a Try call
// fails with ErrUnavailable within the client's own bound on a request to
// a dead server (a second or two) or its context. With the server paused
// (SIGSTOP) and the Locker's session up, a TryLock (session timeout 10 s)
// blocked until its context ended (60 s), then said DeadlineExceeded.
func TestAudit41TryLockPausedServer(t *testing.T) {
	if os.Getenv("DLOCK_AUDIT_OPEN") != "1" {
		t.Skip("open finding: a zookeeper TryLock on a paused server blocks until its context ends")
	}
	z := testserver.StartZooKeeper(t, nil)
	z.RequireFaults(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, "zookeeper://"+z.Addr()+"/audit41")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryLock(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	ls.Unlock(ctx)
	if err := z.Pause(); err != nil {
		t.Fatal(err)
	}
	defer z.Resume()
	tctx, tcancel := context.WithTimeout(ctx, 25*time.Second)
	defer tcancel()
	start := time.Now()
	_, err = l.TryLock(tctx, "audit41-paused")
	took := time.Since(start)
	t.Logf("TryLock: %v after %v", err, took)
	if took > 4*time.Second || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryLock on a paused server: %v after %v; want ErrUnavailable within a few seconds", err, took)
	}
}
