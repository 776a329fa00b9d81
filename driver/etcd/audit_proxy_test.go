package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAuditHeldServerBounds: the member the Locker talks to goes silent
// with its connection open (a paused server, a black-holed link). Every
// call still returns by its context (C7), and Close within its bound
// (C8), while the Locker holds a lease and waits for another.
func TestAuditHeldServerBounds(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	rt := time.Second
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second, ReleaseTimeout: rt}}
	p := newDelayProxy(t, e.Addr())
	a := newTestLocker(t, []string{"http://" + p.addr()}, opts, &netCut{})
	other := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	held, err := a.Lock(ctx, "audit-held-1")
	if err != nil {
		t.Fatal(err)
	}
	ol, err := other.Lock(ctx, "audit-held-2")
	if err != nil {
		t.Fatal(err)
	}
	defer ol.Unlock(ctx)
	waiting := make(chan error, 1)
	go func() {
		_, err := a.Lock(ctx, "audit-held-2")
		waiting <- err
	}()
	time.Sleep(500 * time.Millisecond)
	p.hold()
	defer p.release()

	bound := func(what string, limit time.Duration, f func()) {
		t.Helper()
		start := time.Now()
		f()
		if d := time.Since(start); d > limit {
			t.Errorf("%s took %v, want at most %v", what, d, limit)
		}
	}
	for _, c := range []struct {
		name string
		f    func(ctx context.Context) error
	}{
		{"TryLock", func(ctx context.Context) error { _, err := a.TryLock(ctx, "audit-held-3"); return err }},
		{"Lock", func(ctx context.Context) error { _, err := a.Lock(ctx, "audit-held-4"); return err }},
		{"Refresh", func(ctx context.Context) error { return held.Refresh(ctx, 5*time.Second) }},
	} {
		bound(c.name, 500*time.Millisecond, func() {
			cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer ccancel()
			err := c.f(cctx)
			t.Logf("%s: %v", c.name, err)
			if err == nil {
				t.Errorf("%s succeeded while the server is silent", c.name)
			}
		})
	}
	bound("Unlock", 500*time.Millisecond, func() {
		cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer ccancel()
		t.Logf("Unlock: %v", held.Unlock(cctx))
	})
	bound("Close", rt+300*time.Millisecond, func() { t.Logf("Close: %v", a.Close()) })
	select {
	case err := <-waiting:
		t.Logf("the waiting Lock: %v", err)
	case <-time.After(time.Second):
		t.Errorf("the waiting Lock did not return after Close")
	}
}
