package nemesis

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// leaseView is what the workers and the checker use of a lease: a
// *lock.Lease, or a broken variant's view of one (a lease whose Done
// closes late, whose Unlock returns before it ends it, ...), which the
// checker must catch as it would catch a broken lock package.
type leaseView interface {
	Deadline() time.Time
	Done() <-chan struct{}
	Err() error
	TTL() time.Duration
	Refresh(ctx context.Context, ttl time.Duration) error
	Unlock(ctx context.Context) error
	Detach() (string, error)
	Handle() string
}

var _ leaseView = (*lock.Lease)(nil)

// doFunc is lock.Do's signature.
type doFunc func(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...lock.Option) error

// viewOf is the view the workers have of a lease op returned: the lease
// itself, unless the target is a broken variant that says otherwise.
func (t *Target) viewOf(op string, l *lock.Lease) leaseView {
	if t.view == nil {
		return l
	}
	return t.view(op, l)
}

// runDo is lock.Do, unless the target is a broken variant with its own.
func (t *Target) runDo(ctx context.Context, l Locker, key string, fn func(ctx context.Context) error, opts ...lock.Option) error {
	if t.do == nil {
		return lock.Do(ctx, l, key, fn, opts...)
	}
	return t.do(ctx, l, key, fn, opts...)
}
