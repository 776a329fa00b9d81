package etcd

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url       string
		endpoints []string
		prefix    string
		user, pw  string
		ttl       time.Duration
	}{
		{"etcd://h1:2379,h2:2380/app/locks?ttl=15s", []string{"http://h1:2379", "http://h2:2380"}, "app/locks/", "", "", 15 * time.Second},
		{"etcd://alice:s3cr%3At@h1/", []string{"http://h1:2379"}, "", "alice", "s3cr:t", 0},
		{"etcd://127.0.0.1:2379/x/?tls_insecure_skip_verify=true", []string{"https://127.0.0.1:2379"}, "x/", "", "", 0},
		{"etcd://[::1]:2379", []string{"http://[::1]:2379"}, "", "", "", 0},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		cfg, o, err := parseURL(u)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if !slices.Equal(cfg.Endpoints, tc.endpoints) || o.Prefix != tc.prefix || cfg.Username != tc.user || cfg.Password != tc.pw || o.TTL != tc.ttl {
			t.Errorf("%s: endpoints %v, prefix %q, user %q:%q, options %+v", tc.url, cfg.Endpoints, o.Prefix, cfg.Username, cfg.Password, o.Options)
		}
	}
}

// Bad URLs are ErrInvalid before any I/O, and their errors hide the
// password.
func TestOpenInvalid(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, bad := range []string{
		"etcd://",
		"etcd://h1:2379,,h2:2379/x",
		"etcd://h1:abc/x",
		"etcd://h1:2379/x?prefix=y",
		"etcd://alice@h1:2379",
		"etcd://alice:secretpw@h1:2379?ttl=soon",
		"etcd://h1:2379?tls_cert=/nonexistent.pem",
	} {
		_, err := lock.Open(ctx, bad)
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("Open(%q): the error shows the password: %v", bad, err)
		}
	}
}

// New with a nil client, and a TTL under a second, are refused with
// ErrInvalid, not a panic.
func TestInvalidInput(t *testing.T) {
	l := New(nil, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.Lock(ctx, "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Lock on New(nil, nil) = %v, want ErrInvalid", err)
	}
	e := testserver.SharedEtcd(t)
	c := rawClient(t, e.Endpoints())
	l2 := New(c, nil)
	defer l2.Close()
	if _, err := l2.Lock(ctx, "k", lock.WithTTL(500*time.Millisecond)); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Lock with a 500ms TTL = %v, want ErrInvalid", err)
	}
}

// lock.Open makes no round trip: it returns at once with no member up; a
// TryLock fails at once with ErrUnavailable and the connection's error,
// and a Lock waits until its context ends (its queued wait rides the
// failures out in its place, so the error is its context's).
func TestOpenNoServer(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := lock.Open(context.Background(), "etcd://127.0.0.1:"+strconv.Itoa(port)+"/x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Open took %v", d)
	}
	_, err = l.TryLock(context.Background(), "k")
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnavailable) || !strings.Contains(err.Error(), "connect") {
		t.Errorf("TryLock with no member up: %v; want ErrNotAcquired, ErrUnavailable and the connection's error", err)
	}
	if d := time.Since(start); d > DialTimeout+2*time.Second {
		t.Errorf("TryLock with no member up failed after %v", d)
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = l.Lock(ctx, "k")
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with no member up: %v; want ErrNotAcquired and its context's deadline", err)
	}
	if d := time.Since(start); d > 3*time.Second+DialTimeout+2*time.Second {
		t.Errorf("Lock with a 3s context and no member up returned after %v", d)
	}
	t.Logf("after %v: %v", time.Since(start), err)
}

// A Locker opened from a URL locks, gives its client through lock.As,
// and its Close closes the client.
func TestOpenURL(t *testing.T) {
	e := testserver.SharedEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, "etcd://"+e.Addr()+"/dlock-url-test?ttl=2s")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != 2*time.Second {
		t.Errorf("TTL %v, want the URL's 2s", lease.TTL())
	}
	var c *clientv3.Client
	if !l.As(&c) || c == nil {
		t.Fatal("lock.As gives no *clientv3.Client")
	}
	raw := rawClient(t, e.Endpoints())
	resp, err := raw.Get(ctx, MutexPrefix("dlock-url-test/", "k")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 1 {
		t.Errorf("the lock's entry under the URL's prefix: %v, %v", resp, err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "x"); err == nil {
		t.Error("the Locker's client still works after Close")
	}
}
