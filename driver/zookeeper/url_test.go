package zookeeper

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url      string
		servers  []string
		root     string
		user, pw string
		timeout  time.Duration
		ttl      time.Duration
	}{
		{"zookeeper://h1:2181,h2:2182/app/locks?session_timeout=5s&autorenew=false", []string{"h1:2181", "h2:2182"}, "/app/locks", "", "", 5 * time.Second, 0},
		{"zookeeper://alice:s3cr%3At@h1/", []string{"h1:2181"}, "", "alice", "s3cr:t", 0, 0},
		{"zookeeper://127.0.0.1:2181", []string{"127.0.0.1:2181"}, "", "", "", 0, 0},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		servers, o, err := parseURL(u)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if !slices.Equal(servers, tc.servers) || o.Root != tc.root || o.Username != tc.user || o.Password != tc.pw || o.SessionTimeout != tc.timeout || o.TTL != tc.ttl {
			t.Errorf("%s: servers %v, options %+v", tc.url, servers, o)
		}
	}
}

func TestOpenInvalid(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // refused before any I/O
	for _, bad := range []string{
		"zookeeper://",
		"zookeeper://h1:2181,,h2:2181/x",
		"zookeeper://h1:abc/x",
		"zookeeper://h1:2181/x?sessiontimeout=5s",
		"zookeeper://h1:2181/x?session_timeout=5",
		"zookeeper://h1:2181/x?session_timeout=-1s",
		"zookeeper://h1:2181/x?ttl=1ns",
		"zookeeper://h1:2181/x?ttl=3s", // a grant lasts its session: session_timeout
		"zookeeper://alice@h1:2181/x",
		"zookeeper://h1:2181/x/",
		"zookeeper://h1:2181/a//b",
		"zookeeper://h1:2181/zookeeper/x",
		"zookeeper://h1:2181/x#frag",
		"zookeeper:opaque",
		"zookeeper://h1:2181/x?tls_ca=/nonexistent/ca.pem",
		"zookeeper://h1:2181/x?tls_key=/nonexistent/k.pem",
		"zookeeper://h1:2181/x?tls_insecure_skip_verify=sometimes",
	} {
		l, err := lock.Open(ctx, bad)
		if l != nil || !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestNewNilConn(t *testing.T) {
	l := New(nil, nil)
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.TryLock(ctx, "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("TryLock through New with a nil connection: err = %v, want ErrInvalid", err)
	}
}

// New(conn, nil) works with its documented defaults: the session timeout
// it assumes, AssumedSessionTimeout, bounds the lease's deadline (the
// session's own 10 s timeout is longer, so the assumption is safe).
func TestNewWithDefaults(t *testing.T) {
	conn, negotiated := rawConn(t, testserver.SharedZooKeeper(t).Addrs(), 10*time.Second, nil)
	if negotiated < AssumedSessionTimeout {
		t.Skipf("the test server grants %v, less than the %v New assumes", negotiated, AssumedSessionTimeout)
	}
	l := New(conn, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	lease, err := l.Lock(ctx, "new-with-defaults/"+t.Name())
	if err != nil {
		t.Fatalf("Lock through New(conn, nil): %v", err)
	}
	defer lease.Unlock(ctx)
	if dl := lease.Deadline(); dl.After(start.Add(AssumedSessionTimeout)) || dl.Before(start.Add(AssumedSessionTimeout/2)) {
		t.Errorf("Deadline %v after the request; want within (%v, %v]", dl.Sub(start), AssumedSessionTimeout/2, AssumedSessionTimeout)
	}
}

// Dial refuses options it can check without a server before any I/O: no
// server listens at the address, so only a check made before connecting
// can answer ErrInvalid within the context's second.
func TestDialInvalidBeforeIO(t *testing.T) {
	for _, o := range []*Options{
		{Root: "relative/root"},
		{Username: "alice"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := Dial(ctx, []string{"127.0.0.1:1"}, o)
		cancel()
		if !errors.Is(err, lock.ErrInvalid) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Dial(%+v) = %v, want ErrInvalid before connecting", *o, err)
		}
	}
}

// TestOpenRefusesTTL: a ttl= that ZooKeeper would not keep is refused,
// and the error names the parameter that bounds a grant's life.
func TestOpenRefusesTTL(t *testing.T) {
	_, err := lock.Open(context.Background(), "zookeeper://127.0.0.1:1/x?ttl=3s")
	if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "session_timeout=3s") {
		t.Errorf("Open with ttl=3s: %v; want ErrInvalid naming session_timeout=3s", err)
	}
}
