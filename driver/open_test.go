package driver_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	_ "github.com/dlock-go/dlock/driver/memcached"
	_ "github.com/dlock-go/dlock/driver/memory"
	_ "github.com/dlock-go/dlock/driver/postgres"
	_ "github.com/dlock-go/dlock/driver/redisnx"
	_ "github.com/dlock-go/dlock/driver/rediswatch"
	_ "github.com/dlock-go/dlock/driver/zookeeper"
	"github.com/dlock-go/dlock/lock"
)

// Bounds of TestOpenUnreachable: Open makes no round trip, and the first
// TryLock reports the outage within one round of connection attempts (a
// refused connection fails at once; the clients retry a few times).
const (
	openBound    = time.Second
	tryLockBound = 5 * time.Second
)

// TestOpenUnreachable: with context.Background(), lock.Open of a URL
// whose server is down returns at once on every scheme, and the first
// TryLock reports the outage (ErrNotAcquired, naming the refused
// connection) within a bound, not at some context's end: it has none.
func TestOpenUnreachable(t *testing.T) {
	addr := closedAddr(t)
	for _, scheme := range []string{"redisnx", "rediswatch", "memcached", "zookeeper", "postgres", "memory"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			u := scheme + "://" + addr
			if scheme == "memory" {
				u = "memory://"
			}
			l, err := bounded(t, openBound, "Open("+u+")", func() (lock.Locker, error) {
				return lock.Open(context.Background(), u)
			})
			if err != nil {
				t.Fatalf("Open(%s): %v; want a Locker that reports the outage on use", u, err)
			}
			defer l.Close()
			lease, err := bounded(t, tryLockBound, "TryLock", func() (*lock.Lease, error) {
				return l.TryLock(context.Background(), "k")
			})
			if scheme == "memory" { // no server: nothing can be down
				if err != nil {
					t.Fatalf("TryLock on memory://: %v", err)
				}
				lease.Unlock(context.Background())
				return
			}
			if err == nil {
				t.Fatalf("TryLock on %s, where nothing listens, succeeded", u)
			}
			if !errors.Is(err, lock.ErrNotAcquired) || !isRefused(err) {
				t.Errorf("TryLock on %s: %v; want ErrNotAcquired naming the refused connection", u, err)
			}
		})
	}
}

// bounded runs f and fails the test if it takes longer than limit (the
// call is then left to run: it may never return).
func bounded[T any](t *testing.T, limit time.Duration, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		t.Logf("%s returned after %v: %v", what, time.Since(began).Round(time.Millisecond), r.err)
		return r.v, r.err
	case <-time.After(limit):
		t.Fatalf("%s has not returned after %v", what, limit)
		panic("unreachable")
	}
}

// isRefused reports whether err says that the connection was refused.
func isRefused(err error) bool { return strings.Contains(err.Error(), "connection refused") }

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
