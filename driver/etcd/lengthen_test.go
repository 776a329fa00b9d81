package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestRefreshLengthens: an etcd lease keeps the TTL it was granted with,
// so a Refresh asking for more moves the grant to a longer lease: after a
// 1 s grant refreshed to 4 s, whose holder is then cut off, the key stays
// held about 4 s from the refresh, not 1 s.
func TestRefreshLengthens(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	cut := &netCut{}
	a := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix}, cut)
	b := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix}, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "lengthen"
	la, err := a.Lock(ctx, k, lock.WithTTL(time.Second), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	refreshed := time.Now()
	if err := la.Refresh(ctx, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if v := la.Validity(); v != 4*time.Second {
		t.Errorf("Validity after a 4s Refresh: %v", v)
	}
	cut.setDown(true)
	time.Sleep(2500*time.Millisecond - time.Since(refreshed))
	if lb, err := b.TryLock(ctx, k); !errors.Is(err, lock.ErrHeld) {
		if lb != nil {
			lb.Unlock(ctx)
		}
		t.Fatalf("TryLock 2.5s after a 4s Refresh of a 1s grant: %v; want ErrHeld (the grant kept its 1s lease)", err)
	}
	lb, err := b.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(ctx)
	if d := time.Since(refreshed); d < 4*time.Second {
		t.Errorf("the key was free %v after the 4s Refresh", d)
	}
}
