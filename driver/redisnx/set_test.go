package redisnx

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// A set attempt whose clean-up (a Release per lease, after its reply was
// lost) ran before the request reached the server grants nothing: the
// tombstones the clean-up left refuse it, all or none.
func TestAcquireSetAfterCleanup(t *testing.T) {
	c := sharedClient(t, nil)
	core, _ := redisx.NewCore("redisnx", c, nil, false)
	d := newDriver(core)
	defer d.Close()
	k := testKey(t)
	ls := []*driver.Lease{
		{Key: k + "/a", Owner: "0123456789abcdef0123456789abcdef", Mode: driver.Exclusive, TTL: 5 * time.Second},
		{Key: k + "/b", Owner: "fedcba9876543210fedcba9876543210", Mode: driver.Exclusive, TTL: 5 * time.Second},
	}
	ctx := tctx(t, 10*time.Second)
	if err := d.Release(ctx, ls[1]); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("clean-up before the grant: %v, want ErrNotHeld", err)
	}
	if err := d.AcquireSet(ctx, ls); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("AcquireSet after its clean-up: %v, want ErrHeld (nothing granted)", err)
	}
	for _, l := range ls {
		if v, err := c.Get(ctx, lockKey(d.Prefix, l.Key)).Result(); err != redis.Nil {
			t.Errorf("lock key of %q after a refused set: %q, %v; want none", l.Key, v, err)
		}
	}
}

// Where the keys may be on different servers, AcquireSet refuses with
// ErrNotAtomic before any I/O.
func TestAcquireSetNotAtomic(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	defer ring.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	k := testKey(t)
	for name, c := range map[string]redis.UniversalClient{"ring": ring, "cluster": cluster} {
		core, _ := redisx.NewCore("redisnx", c, nil, false)
		d := newDriver(core)
		ls := []*driver.Lease{
			{Key: k + "/a", Owner: "0123456789abcdef0123456789abcdef", TTL: time.Second},
			{Key: k + "/b", Owner: "fedcba9876543210fedcba9876543210", TTL: time.Second},
		}
		if redisx.Slot(lockKey(d.Prefix, ls[0].Key)) == redisx.Slot(lockKey(d.Prefix, ls[1].Key)) {
			t.Fatalf("the test's keys share a slot: pick others")
		}
		start := time.Now()
		if err := d.AcquireSet(tctx(t, 10*time.Second), ls); !errors.Is(err, driver.ErrNotAtomic) || time.Since(start) > time.Second {
			t.Errorf("%s: AcquireSet of keys in two slots: %v after %v, want ErrNotAtomic at once", name, err, time.Since(start))
		}
		d.Close()
	}
}
