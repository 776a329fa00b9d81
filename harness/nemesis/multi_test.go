package nemesis

import (
	"context"
	"slices"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
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
