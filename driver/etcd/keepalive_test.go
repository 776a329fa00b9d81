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

// TestDelayedKeepAliveReplies: the holder's keep-alive replies come late
// (the proxy holds every byte from the server for 1.5 s of a 3 s TTL),
// and once its first renewal is sent, nothing more it sends reaches the
// server, while that renewal's reply still comes. Its Done must close
// before another client is granted the key: the renewal's validity
// counts from when its request was sent (the server renewed the lease
// then), not from when its late reply came, which would keep the lease
// open 1.5 s after the server let it go.
func TestDelayedKeepAliveReplies(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	ttl := 3 * time.Second
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: ttl}}
	p := newDelayProxy(t, e.Addr())
	a := newTestLocker(t, []string{"http://" + p.addr()}, opts, &netCut{})
	b := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := "delayed-keepalive"

	la, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	p.setDelay(1500 * time.Millisecond)
	// The first renewal goes a third of the way to the deadline.
	time.Sleep(time.Until(la.Deadline())/3 + 300*time.Millisecond)
	p.dropRequests()
	cutAt := time.Now()

	lb, err := b.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	grantedAt := time.Now()
	defer lb.Unlock(ctx)
	select {
	case <-la.Done():
	default:
		t.Fatalf("b was granted the key %v after the cut while a's lease is still open (deadline in %v)",
			grantedAt.Sub(cutAt), time.Until(la.Deadline()))
	}
	if !errors.Is(la.Err(), lock.ErrLost) {
		t.Errorf("a's Err = %v, want ErrLost", la.Err())
	}
	if lb.Token() <= la.Token() {
		t.Errorf("b's token %d, not above a's %d", lb.Token(), la.Token())
	}
	t.Logf("b granted %v after the cut", grantedAt.Sub(cutAt))
}
