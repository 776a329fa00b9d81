package rediswatch

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// Malformed URLs and unknown or contradictory parameters are refused with
// ErrInvalid, without I/O.
func TestOpenInvalid(t *testing.T) {
	for _, u := range []string{
		"rediswatch://h:6379?bogus=1",
		"rediswatch://h:6379?prefix=",
		"rediswatch://h:6379?tls=maybe",
		"rediswatchs://h:6379?tls=false",
		"rediswatch://h:6379?cluster=sometimes",
		"rediswatch://h:6379/x",
		"rediswatch://h:6379/-1",
		"rediswatch://h1:1,h2:2/3",
		"rediswatch://h:6379/0?cluster=true&ttl=1s&ttl=2s",
		"rediswatch://h:99999",
		"rediswatch://h:0",
		"rediswatch://h1:1,,h2:2",
		"rediswatch:opaque",
		"rediswatch://h:6379?pool_size=many",
		"rediswatch://h1:1,h2:2?cluster=false",
		"rediswatch://h:6379?ttl=1ms",
		"rediswatch://h:6379?autorenew=perhaps",
	} {
		l, err := lock.Open(context.Background(), u)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) succeeded", u)
		} else if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", u, err)
		}
	}
}

// Valid URLs make the client they describe, without I/O.
func TestOpenClients(t *testing.T) {
	type want struct {
		addrs      []string
		cluster    bool
		user, pass string
		db         int
		tls        bool
	}
	for u, w := range map[string]want{
		"rediswatch://localhost":                        {addrs: []string{"localhost:6379"}},
		"rediswatch://":                                 {addrs: []string{"localhost:6379"}},
		"rediswatch://:6380":                            {addrs: []string{"localhost:6380"}},
		"rediswatch://u:p%40ss@h:7000/3?ttl=5s":         {addrs: []string{"h:7000"}, user: "u", pass: "p@ss", db: 3},
		"rediswatchs://h:7000":                          {addrs: []string{"h:7000"}, tls: true},
		"rediswatch://h:7000?tls=true&prefix=x:":        {addrs: []string{"h:7000"}, tls: true},
		"rediswatch://[::1]:7000":                       {addrs: []string{"[::1]:7000"}},
		"rediswatch://h1:7000,h2,h3:7002":               {addrs: []string{"h1:7000", "h2:6379", "h3:7002"}, cluster: true},
		"rediswatch://:secret@h:7000?cluster=true":      {addrs: []string{"h:7000"}, cluster: true, pass: "secret"},
		"rediswatchs://u:p@h1:1,h2:2/0?autorenew=false": {addrs: []string{"h1:1", "h2:2"}, cluster: true, user: "u", pass: "p", tls: true},
	} {
		l, err := lock.Open(context.Background(), u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		var c *redis.Client
		var cc *redis.ClusterClient
		switch {
		case w.cluster && l.As(&cc):
			o := cc.Options()
			if !slices.Equal(o.Addrs, w.addrs) || o.Username != w.user || o.Password != w.pass || (o.TLSConfig != nil) != w.tls || !o.ContextTimeoutEnabled {
				t.Errorf("Open(%q): cluster options %v %q %q tls=%v", u, o.Addrs, o.Username, o.Password, o.TLSConfig != nil)
			}
		case !w.cluster && l.As(&c):
			o := c.Options()
			if o.Addr != w.addrs[0] || o.Username != w.user || o.Password != w.pass || o.DB != w.db || (o.TLSConfig != nil) != w.tls || !o.ContextTimeoutEnabled {
				t.Errorf("Open(%q): options %v %q %q db=%d tls=%v", u, o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil)
			}
		default:
			t.Errorf("Open(%q): wrong client type", u)
		}
		var rdb redis.UniversalClient
		if !l.As(&rdb) || rdb == nil {
			t.Errorf("Open(%q): As(*redis.UniversalClient) failed", u)
		}
		var s Stats
		if !l.As(&s) {
			t.Errorf("Open(%q): As(*Stats) failed", u)
		}
		var wrong *int
		if l.As(&wrong) {
			t.Errorf("Open(%q): As(**int) succeeded", u)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := rdb.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
			t.Errorf("Open(%q): the client is still open after Close: %v", u, err)
		}
	}
}

// New leaves the caller's client open; a nil client is refused before I/O.
func TestNewLeavesClientOpen(t *testing.T) {
	rdb := standalone(t)
	l := New(rdb, nil)
	lease, err := l.TryLock(testCtx(t), testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = lease
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}

	for name, c := range map[string]redis.UniversalClient{
		"nil":                nil,
		"nil *redis.Client":  (*redis.Client)(nil),
		"nil *ClusterClient": (*redis.ClusterClient)(nil),
		"nil *redis.Ring":    (*redis.Ring)(nil),
	} {
		l := New(c, nil)
		if _, err := l.TryLock(context.Background(), "k"); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("TryLock with a %s client: err = %v, want ErrInvalid", name, err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close of a Locker with a %s client: %v", name, err)
		}
	}
}
