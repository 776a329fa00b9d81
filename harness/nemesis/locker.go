package nemesis

import (
	"context"

	"github.com/dlock-go/dlock/lock"
)

// Locker is what a run drives of a *lock.Locker. A target may wrap one:
// to close the client it was opened over (ownedBy), to record a Do's
// grants (doLocker), or, in a broken variant, to change some calls.
type Locker interface {
	Lock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error)
	TryLock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error)
	RLock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error)
	TryRLock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error)
	Acquire(ctx context.Context, key string, limit int, opts ...lock.Option) (*lock.Lease, error)
	TryAcquire(ctx context.Context, key string, limit int, opts ...lock.Option) (*lock.Lease, error)
	Resume(ctx context.Context, handle string, opts ...lock.Option) (*lock.Lease, error)
	LockMany(ctx context.Context, keys []string, opts ...lock.Option) (*lock.MultiLease, error)
	TryLockMany(ctx context.Context, keys []string, opts ...lock.Option) (*lock.MultiLease, error)
	Inspect(ctx context.Context, key string) (*lock.KeyState, error)
	Election(name string) (*lock.Election, error)
	Supports(c lock.Capability) error
	Close() error
}

var _ Locker = (*lock.Locker)(nil)
