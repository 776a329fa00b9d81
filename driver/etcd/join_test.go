package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TestJoinRidesOutFailure: a Join whose requests fail (the member it
// talks to died, here its connections are cut) is a wait like any other,
// not a failed Lock: it answers HeldError, and once the member is back a
// Check makes the entry and takes the key.
func TestJoinRidesOutFailure(t *testing.T) {
	e := testserver.SharedEtcd(t)
	cut := &netCut{}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(cut.dial)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, _ := newDriver(&Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())})
	d.c = c
	defer d.Close()
	l := &driver.Lease{Key: "join-failure", Owner: "0123456789abcdef0123456789abcdef", TTL: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cut.setDown(true)
	wake := make(chan struct{}, 1)
	if err := d.Join(ctx, l, wake); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Join with the member out of reach: %v; want a HeldError (the wait goes on)", err)
	}
	cut.setDown(false)
	for {
		err := d.Check(ctx, l)
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("Check: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if l.Token == 0 {
		t.Error("granted without a token")
	}
	if err := d.Release(ctx, l); err != nil {
		t.Errorf("Release: %v", err)
	}
}
