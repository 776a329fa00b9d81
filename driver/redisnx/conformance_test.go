package redisnx

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// redisnx does all the suite checks, on one server and on a Cluster: no
// subtest may skip.
func TestConformance(t *testing.T) {
	addr := testserver.SharedRedis(t).Addr()
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		h := newHarness(t, func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: addr}) })
		h.outage = outage
		return h
	}, nil)
}

// The Cluster runs all but the outage checks, which one server covers.
func TestConformanceCluster(t *testing.T) {
	addrs := testserver.SharedRedisCluster(t).Addrs()
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		return newHarness(t, func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}) })
	}, drivertest.Skips{
		"Outage/LockWaits":    "one server covers it (TestConformance)",
		"Outage/TryLockFails": "one server covers it (TestConformance)",
	})
}

// outage is a harness on a server of the subtest's own, which the suite
// stops and starts.
func outage(t *testing.T) *drivertest.Outage {
	srv := testserver.StartRedis(t, nil)
	h := newHarness(t, func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: srv.Addr()}) })
	return &drivertest.Outage{Harness: h, Stop: srv.Stop, Start: srv.Restart}
}

// harness tampers with the server through a raw client of its own.
type harness struct {
	dial   func() redis.UniversalClient
	raw    redis.UniversalClient
	outage func(t *testing.T) *drivertest.Outage
}

func newHarness(t *testing.T, dial func() redis.UniversalClient) *harness {
	h := &harness{dial: dial, raw: dial()}
	t.Cleanup(func() { h.raw.Close() })
	return h
}

// NewLocker returns a Locker that owns its client, as one opened from a URL.
func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	var ro *Options
	if o != nil {
		ro = &Options{Options: *o}
	}
	l := newLocker(h.dial(), ro, true)
	t.Cleanup(func() { l.Close() })
	return l
}

// Crash closes the Locker's client: all its traffic fails, nothing is
// released.
func (h *harness) Crash(t *testing.T, l *lock.Locker) {
	var c redis.UniversalClient
	if !l.As(&c) {
		t.Fatalf("not a redisnx Locker")
	}
	c.Close()
	lanesOf(t, l).Close() // the Locker's own connections
}

func (h *harness) DeleteKey(ctx context.Context, key string) error {
	return h.raw.Del(ctx, lockKey(DefaultPrefix, key)).Err()
}

func (h *harness) StealKey(ctx context.Context, key string) error {
	return h.raw.Set(ctx, lockKey(DefaultPrefix, key), "intruder", time.Minute).Err()
}

func (h *harness) DeleteCounter(ctx context.Context, key string) error {
	return h.raw.Del(ctx, lockKey(DefaultPrefix, key)+counterSuffix).Err()
}

// Residue lists the lock key, the queue's keys, and the readers, holds and
// permits that exist. Tombstones are not residue: they expire with the TTL.
func (h *harness) Residue(ctx context.Context, key string) ([]string, error) {
	lk := lockKey(DefaultPrefix, key)
	var out []string
	for _, k := range []string{lk, lk + queueSuffix, lk + entriesSuffix, lk + readersSuffix, lk + redisx.HoldsSuffix, lk + permitsSuffix} {
		n, err := h.raw.Exists(ctx, k).Result()
		if err != nil {
			return out, err
		}
		if n > 0 {
			out = append(out, k)
		}
	}
	return out, nil
}

func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{Notify: true, Shared: true, DeletableCounter: true, Resume: true, Reentry: true, Permits: true, Notes: true, Inspect: inspectCaps, Outage: h.outage}
}
