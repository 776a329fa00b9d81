package nemesis

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
)

// keepPartial is a Locker whose sets are taken key by key with TryLock,
// in sorted order, keeping the keys taken when one is held: a multi-key
// lock that is not all or nothing. A set taken whole is given back and
// taken again by the inner Locker, for a MultiLease to return.
type keepPartial struct{ Locker }

func (k *keepPartial) take(ctx context.Context, keys []string, opts []lock.Option) error {
	var got []*lock.Lease
	for _, key := range slices.Sorted(slices.Values(keys)) {
		l, err := k.Locker.TryLock(ctx, key, opts...)
		if err != nil {
			return err // the leases in got stay held, renewed, by no one
		}
		got = append(got, l)
	}
	for _, l := range got {
		l.Unlock(ctx)
	}
	return nil
}

func (k *keepPartial) LockMany(ctx context.Context, keys []string, opts ...lock.Option) (*lock.MultiLease, error) {
	if err := k.take(ctx, keys, opts); err != nil {
		return nil, err
	}
	return k.Locker.LockMany(ctx, keys, opts...)
}

func (k *keepPartial) TryLockMany(ctx context.Context, keys []string, opts ...lock.Option) (*lock.MultiLease, error) {
	if err := k.take(ctx, keys, opts); err != nil {
		return nil, err
	}
	return k.Locker.TryLockMany(ctx, keys, opts...)
}

func init() {
	variants = append(variants, variant{name: "multi-keep", kind: "multi-partial", duration: 6 * time.Second,
		breaks: "a set attempt that finds a key held keeps the keys it took before it",
		setup: func() (*Target, func()) {
			return variantTarget("multi-keep", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
				return &keepPartial{Locker: inner}
			})), nil
		}})
}

// oneStepSets finds driver.SetAcquirer on the driver under a Locker,
// wrapped or not, and tells a driver without it; a Locker it cannot see
// into is an error, not a guess.
func TestOneStepSets(t *testing.T) {
	mem := memory.New(memory.NewStore(), nil)
	defer mem.Close()
	mc, err := lock.Open(context.Background(), "memcached://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	for _, c := range []struct {
		name string
		lk   Locker
		want bool
	}{
		{"memory", mem, true},
		{"memory, wrapped twice", &keepPartial{Locker: ownedBy(mem, io.NopCloser(nil))}, true},
		{"memcached", mc, false},
		{"memcached, wrapped", semOnly{mc}, false},
	} {
		got, err := oneStepSets(c.lk)
		if err != nil || got != c.want {
			t.Errorf("%s: oneStepSets = %v, %v; want %v, nil", c.name, got, err, c.want)
		}
	}
	if _, err := oneStepSets(opaque{}); err == nil {
		t.Error("a Locker that wraps no *lock.Locker: no error")
	}
}

// opaque is a Locker with no *lock.Locker under it.
type opaque struct{ *keepPartial }

// The set keys are distinct, and all in one Redis Cluster hash slot.
func TestSetKeys(t *testing.T) {
	keys := setKeys()
	if len(keys) != nSetKeys || len(slices.Compact(slices.Sorted(slices.Values(keys)))) != nSetKeys {
		t.Fatalf("set keys %q: want %d distinct keys", keys, nSetKeys)
	}
	for _, k := range keys {
		if redisx.Slot(redisx.LockKey("dlock:", k)) != redisx.Slot(redisx.LockKey("dlock:", keys[0])) {
			t.Errorf("set key %q is not in %q's hash slot", k, keys[0])
		}
	}
}
