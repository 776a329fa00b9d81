package redisnx

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// URL parsing is internal/redisx's (TestParse there); here,
// that Open uses it.

func TestOpenRefusesBadURLs(t *testing.T) {
	for _, u := range []string{
		"redisnx://h:6379?ttl=nope",
		"redisnx://h:6379?bogus=1",
		"redisnx://h:6379?prefix=a{b",
		"redisnx://h:6379?prefix=",
		"redisnx://h:6379?cluster=maybe",
		"redisnx://a:1,b:2?cluster=false",
		"redisnx://a:1,b:2/1",
		"redisnx://h:6379/x",
		"redisnx://h:6379/-1",
		"redisnx://h:0",
		"redisnx://h:99999",
		"redisnxs://h:6379?tls=false",
		"redisnx://h:6379?tls=maybe",
		"redisnx://h:6379#frag",
		"redisnx:h:6379",
	} {
		l, err := lock.Open(t.Context(), u)
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", u, err)
		}
		if l != nil {
			l.Close()
		}
	}
}

// A Locker opened from a URL owns its client, reached with lock.As, and
// closes it; TLS is configured when asked for.
func TestOpen(t *testing.T) {
	addr := testserver.SharedRedis(t).Addr()
	l, err := lock.Open(t.Context(), "redisnx://"+addr+"/0?ttl=5s&prefix=opentest:")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	var c *redis.Client
	if !l.As(&c) || c.Options().Addr != addr || c.Options().TLSConfig != nil || !c.Options().ContextTimeoutEnabled {
		t.Fatalf("As(*redis.Client): %v", c)
	}
	k := testKey(t)
	lease, err := l.TryLock(tctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if lease.TTL() != 5*time.Second {
		t.Errorf("TTL %v, want 5s from the URL", lease.TTL())
	}
	raw := sharedClient(t, nil)
	if n := raw.Exists(tctx(t, 10*time.Second), lockKey("opentest:", k)).Val(); n != 1 {
		t.Errorf("no lock key under the URL's prefix")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Ping(tctx(t, 10*time.Second)).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("the Locker's client after Close: %v, want closed", err)
	}
	if n := raw.Exists(tctx(t, 10*time.Second), lockKey("opentest:", k)).Val(); n != 0 {
		t.Errorf("Close left the lease's key")
	}

	l, err = lock.Open(t.Context(), "redisnxs://"+addr)
	if err != nil {
		t.Fatalf("Open TLS: %v", err)
	}
	defer l.Close()
	if !l.As(&c) || c.Options().TLSConfig == nil {
		t.Errorf("redisnxs: no TLS configuration")
	}
}

// New leaves the caller's client open; As reaches it; bad options are
// reported by the first call.
func TestNew(t *testing.T) {
	c := sharedClient(t, nil)
	l := New(c, &Options{Prefix: "newtest:"})
	var u redis.UniversalClient
	var cc *redis.ClusterClient
	if !l.As(&u) || u != c || l.As(&cc) {
		t.Errorf("As: UniversalClient %v, ClusterClient %v", u, cc)
	}
	lease, err := l.TryLock(tctx(t, 10*time.Second), testKey(t))
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !errors.Is(lease.Err(), lock.ErrClosed) {
		t.Errorf("lease after Close: %v", lease.Err())
	}
	if err := c.Ping(tctx(t, 10*time.Second)).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}

	for name, l := range map[string]*lock.Locker{
		"prefix with braces": New(c, &Options{Prefix: "a{b}"}),
		"nil client":         New(nil, nil),
		"nil *redis.Client":  New((*redis.Client)(nil), nil),
		"nil *ClusterClient": New((*redis.ClusterClient)(nil), nil),
		"nil *redis.Ring":    New((*redis.Ring)(nil), nil),
	} {
		if _, err := l.TryLock(t.Context(), "k"); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%s: TryLock: %v, want ErrInvalid", name, err)
		}
		l.Close()
	}
}
