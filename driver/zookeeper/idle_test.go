package zookeeper

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestGrantAfterIdleIsPrompt: a Locker idle for longer than half its
// session timeout grants its next Lock at once, as other backends do. A
// grant needs proof that the leader heard from the session in the last
// half timeout; the monitor keeps that proof fresh while the session
// lasts, idle or not. (Before, it stopped with the Locker's last lease,
// and the next grant waited reportLag, 0.3 of the timeout, for a request
// old enough to be proven: 1.2 s here, 3 s with the default 10 s.)
func TestGrantAfterIdleIsPrompt(t *testing.T) {
	const timeout = 4 * time.Second
	url := "zookeeper://" + strings.Join(testserver.SharedZooKeeper(t).Addrs(), ",") + "/idle?session_timeout=" + timeout.String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, idle := range []time.Duration{0, timeout * 3 / 4, timeout} {
		time.Sleep(idle)
		t0 := time.Now()
		lease, err := l.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if i > 0 && took > reportLag(timeout)/2 {
			t.Errorf("Lock after %v idle took %v; want well under reportLag (%v): the session's proof went stale while idle", idle, took, reportLag(timeout))
		}
	}
}
