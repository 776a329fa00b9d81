package zookeeper

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestOpenUnreachable: opening a zookeeper:// URL where nothing listens
// returns when the context ends, not later, and says why it could not
// connect: the refused connection, not only the context's end.
func TestOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, limit := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		began := time.Now()
		l, err := lock.Open(ctx, "zookeeper://u:pw@"+addr+"/x")
		took := time.Since(began)
		cancel()
		if err == nil {
			l.Close()
			t.Fatalf("Open of %s, where nothing listens, succeeded", addr)
		}
		if took > limit+500*time.Millisecond {
			t.Errorf("Open with a %v context took %v", limit, took)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Open with a %v context: %v; want the context's end and the refused connection", limit, err)
		}
	}
}

// TestDialBoundsAttempts: until Dial returns, a connection attempt gets
// no more time than ctx has left (go-zookeeper asks for 1s).
func TestDialBoundsAttempts(t *testing.T) {
	got := make(chan time.Duration, 16)
	o := &Options{Dialer: func(network, address string, timeout time.Duration) (net.Conn, error) {
		select {
		case got <- timeout:
		default:
		}
		return nil, errors.New("no route (test dialer)")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, []string{"127.0.0.1:1"}, o)
	if err == nil || !strings.Contains(err.Error(), "no route (test dialer)") {
		t.Errorf("Dial: %v; want the dialer's error", err)
	}
	if d := <-got; d <= 0 || d > 200*time.Millisecond {
		t.Errorf("the first attempt was given %v; want at most the context's 200ms", d)
	}
}
