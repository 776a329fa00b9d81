package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// skewedLocker is a Locker whose wall clock (tokens, SINCE) is off by
// skew; its TTLs are etcd's and its validity its own monotonic clock's.
func skewedLocker(t *testing.T, endpoints []string, opts *Options, skew time.Duration) *lock.Locker {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	d, lo := newDriver(opts)
	d.c, d.owned = c, true
	d.wall = func() time.Time { return time.Now().Add(skew) }
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestAudit38ClockSkew: Lockers whose clocks are ten minutes ahead and
// ten minutes behind take one key in turn (Try calls and queued grants):
// tokens keep rising (the counter carries the fast clock's tokens to the
// slow one), and a grant lasts its TTL for the other whatever their
// clocks say (leases are etcd's, validity the holder's monotonic clock).
func TestAudit38ClockSkew(t *testing.T) {
	e := testserver.SharedEtcd(t)
	opts := &Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())}
	fast := skewedLocker(t, e.Endpoints(), opts, 10*time.Minute)
	slow := skewedLocker(t, e.Endpoints(), opts, -10*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := "clock-skew"
	var last uint64
	rising := func(who string, l *lock.Lease) {
		t.Helper()
		if l.Token() <= last {
			t.Fatalf("%s: token %d after %d", who, l.Token(), last)
		}
		last = l.Token()
	}
	for i := range 4 {
		for _, c := range []struct {
			who string
			lk  *lock.Locker
		}{{"fast", fast}, {"slow", slow}} {
			l, err := c.lk.TryLock(ctx, k)
			if err != nil {
				t.Fatalf("%s, round %d: %v", c.who, i, err)
			}
			rising(c.who, l)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A queued hand-over from the fast clock to the slow one.
	lf, err := fast.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	rising("fast", lf)
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := slow.Lock(ctx, k)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(500 * time.Millisecond)
	if err := lf.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	rising("slow, queued", ls)
	if err := ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// The slow clock's 3 s grant, not renewed, holds for the fast one
	// until about its TTL.
	granted := time.Now() // the lease lasts 3 s from after this
	l, err := slow.TryLock(ctx, k, lock.WithTTL(3*time.Second), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	for time.Since(granted) < 2500*time.Millisecond {
		lf, err := fast.TryLock(ctx, k)
		if errors.Is(err, lock.ErrHeld) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		after := time.Since(granted)
		if lf != nil {
			lf.Unlock(ctx)
		}
		if err == nil && after >= 3*time.Second {
			break // a TryLock slower than the margin: the machine, not the lease
		}
		t.Fatalf("the fast clock's TryLock %v into the slow clock's 3 s grant: %v, want ErrHeld", after.Round(time.Millisecond), err)
	}
	lf, err = fast.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	rising("fast, after the expiry", lf)
	if l.Err() == nil {
		t.Errorf("the slow clock's grant is not lost %v after its 3 s TTL", time.Since(granted).Round(time.Millisecond))
	}
	lf.Unlock(ctx)
}
