package memcached

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

func TestTTLSeconds(t *testing.T) {
	for _, tc := range []struct {
		ttl      time.Duration
		secs     int32
		validity time.Duration
	}{
		{3 * time.Second, 3, time.Second},
		{3*time.Second + time.Nanosecond, 4, 2 * time.Second},
		{3500 * time.Millisecond, 4, 2 * time.Second},
		{30 * time.Second, 30, 28 * time.Second},
		{MaxTTL, 2592000, MaxTTL - 2*time.Second},
	} {
		secs, err := ttlSeconds(tc.ttl)
		if err != nil || secs != tc.secs || validity(secs) != tc.validity {
			t.Errorf("ttlSeconds(%v) = %d, %v (validity %v); want %d (validity %v)", tc.ttl, secs, err, validity(secs), tc.secs, tc.validity)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Second, 2 * time.Second, MinTTL - time.Nanosecond, MaxTTL + time.Nanosecond} {
		_, err := ttlSeconds(ttl)
		if !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("ttlSeconds(%v): err = %v, want ErrInvalid", ttl, err)
		}
	}
	_, err := ttlSeconds(2 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "N-2") {
		t.Errorf("error for a short TTL does not say why: %v", err)
	}
}

// Bad options and TTLs are refused before any I/O: the client here points
// at no server.
func TestInvalidBeforeIO(t *testing.T) {
	c := memcache.New("127.0.0.1:1")
	ctx := context.Background()
	for name, l := range map[string]*lock.Locker{
		"short default TTL": New(c, &Options{Options: lock.Options{TTL: 2 * time.Second}}),
		"bad prefix":        New(c, &Options{Prefix: "a b"}),
		"nil client":        New(nil, nil),
	} {
		if _, err := l.TryLock(ctx, "k"); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
		l.Close()
	}
	l := New(c, nil)
	defer l.Close()
	for _, ttl := range []time.Duration{time.Second, 2500 * time.Millisecond} {
		if _, err := l.TryLock(ctx, "k", lock.WithTTL(ttl)); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("TTL %v: err = %v, want ErrInvalid", ttl, err)
		}
	}
}
