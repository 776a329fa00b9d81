package redisnx

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit41TryLockHungServer: lock's outage rule says a Try call fails
// with ErrUnavailable within the client's own bound on a request to a
// dead server (a second or two) or its context. Against a server that
// accepts connections and never answers, go-redis's own bound is its
// read timeout (3 s) per try: measured 5 s on an idle machine, more than
// the doc's "a second or two" but bounded, and ErrUnavailable.
func TestAudit41TryLockHungServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, "redisnx://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	_, err = l.TryLock(ctx, "audit41-hung")
	took := time.Since(start)
	t.Logf("TryLock: %v after %v", err, took)
	if took > 8*time.Second || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryLock on a server that never answers: %v after %v; want ErrUnavailable within a few seconds", err, took)
	}
}
