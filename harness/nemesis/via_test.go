package nemesis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// viaLocker is a driver, for lock.New, whose backend is a memory Locker
// over a run's Store: each of its grants is a lease of that inner Locker
// (not renewed: the outer lock refreshes it), found by the grant's owner
// in a table that every viaLocker over the Store shares, so that a grant
// detached through one is resumed through another. With no hook set it is
// a correct driver; a broken variant sets one to break one thing.
type viaLocker struct {
	inner Locker
	held  *heldTable

	// limit is the limit asked of the inner Locker for a permit (nil:
	// the permit's own).
	limit func(l *driver.Lease) int
	// granted and resumed may change what a grant, a Resume, reports.
	granted, resumed func(l *driver.Lease)
	// release, when it returns true, replaces the release of l's grant.
	release func(l *driver.Lease, in *lock.Lease) (bool, error)
	// resumable: the driver resumes grants (a driver.Resumer that says
	// so).
	resumable bool
	// notesClaimed: the driver says it stores notes (Caps.Notes) and
	// inspects keys (the inner Locker's Inspect), but keeps no note.
	notesClaimed bool
}

// viaInspector is a viaLocker that inspects keys through its inner
// Locker.
type viaInspector struct{ *viaLocker }

func (d viaInspector) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	st, err := d.inner.Inspect(ctx, key)
	if err != nil {
		return driver.KeyState{}, err
	}
	var out driver.KeyState
	for _, h := range st.Holders {
		out.Holders = append(out.Holders, driver.Holder{Owner: h.Owner, Mode: h.Mode, Limit: h.Limit, Token: h.Token, Remaining: h.Remaining, Since: h.Since, Note: h.Note})
	}
	out.Unknown.Waiters = true
	return out, nil
}

// newVia returns a Locker over a viaLocker on store, set up by set.
func newVia(store *memory.Store, o lock.Options, set func(d *viaLocker)) Locker {
	d := &viaLocker{inner: memory.New(store, &o), held: heldFor(store)}
	if set != nil {
		set(d)
	}
	if d.notesClaimed {
		return lock.New(viaInspector{d}, &o)
	}
	return lock.New(d, &o)
}

// heldTable is the inner leases of the grants of a Store's viaLockers, by
// owner.
type heldTable struct {
	mu sync.Mutex
	m  map[string]*lock.Lease
}

var heldTables = struct {
	sync.Mutex
	m map[*memory.Store]*heldTable
}{m: map[*memory.Store]*heldTable{}}

func heldFor(s *memory.Store) *heldTable {
	heldTables.Lock()
	defer heldTables.Unlock()
	if heldTables.m[s] == nil {
		heldTables.m[s] = &heldTable{m: map[string]*lock.Lease{}}
	}
	return heldTables.m[s]
}

func (h *heldTable) put(owner string, l *lock.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for o, x := range h.m { // forget the grants that ended unreleased
		if closed(x.Done()) {
			delete(h.m, o)
		}
	}
	h.m[owner] = l
}

func (h *heldTable) get(owner string) *lock.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[owner]
}

func (h *heldTable) drop(owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, owner)
}

func (d *viaLocker) Capabilities() driver.Caps {
	c := driver.Caps{Shared: driver.Yes, Permits: driver.Yes, Resume: driver.Yes}
	if !d.resumable {
		c.Resume = driver.No("this driver resumes no grant")
	}
	if d.notesClaimed {
		c.Notes = driver.Yes // the bug of notes-dropped: Acquire drops l.Note
	}
	return c
}

func (d *viaLocker) Validate(l *driver.Lease) error { return nil }

func (d *viaLocker) Acquire(ctx context.Context, l *driver.Lease) error {
	opts := []lock.Option{lock.WithTTL(l.TTL), lock.WithDisableAutoRenew(true)}
	var lease *lock.Lease
	var err error
	switch l.Mode {
	case driver.Exclusive:
		lease, err = d.inner.TryLock(ctx, l.Key, opts...)
	case driver.Shared:
		lease, err = d.inner.TryRLock(ctx, l.Key, opts...)
	case driver.Permit:
		limit := l.Limit
		if d.limit != nil {
			limit = d.limit(l)
		}
		lease, err = d.inner.TryAcquire(ctx, l.Key, limit, opts...)
	}
	if err != nil {
		return driverError(err)
	}
	d.held.put(l.Owner, lease)
	l.Token, l.Validity = lease.Token(), l.TTL
	if d.granted != nil {
		d.granted(l)
	}
	return nil
}

func (d *viaLocker) Release(ctx context.Context, l *driver.Lease) error {
	lease := d.held.get(l.Owner)
	if lease == nil {
		return driver.ErrNotHeld
	}
	if d.release != nil {
		if done, err := d.release(l, lease); done {
			d.held.drop(l.Owner)
			return err
		}
	}
	err := lease.Unlock(ctx)
	if err == nil || errors.Is(err, lock.ErrNotHeld) {
		d.held.drop(l.Owner)
	}
	return driverError(err)
}

func (d *viaLocker) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	lease := d.held.get(l.Owner)
	if lease == nil {
		return 0, driver.ErrNotHeld
	}
	if err := lease.Refresh(ctx, ttl); err != nil {
		return 0, driverError(err)
	}
	return ttl, nil
}

// Resume extends the inner lease of l's owner if it has l's token and
// limit.
func (d *viaLocker) Resume(ctx context.Context, l *driver.Lease) error {
	if !d.resumable {
		return fmt.Errorf("%w: this driver resumes no grant", driver.ErrInvalid)
	}
	lease := d.held.get(l.Owner)
	if lease == nil || lease.Token() != l.Token || lease.Limit() != l.Limit {
		return driver.ErrNotHeld
	}
	if err := lease.Refresh(ctx, l.TTL); err != nil {
		return driverError(err)
	}
	l.Validity = l.TTL
	if d.resumed != nil {
		d.resumed(l)
	}
	return nil
}

func (d *viaLocker) Close() error { return d.inner.Close() }

// driverError maps the inner Locker's errors to the driver's sentinels.
func driverError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lock.ErrHeld):
		return &driver.HeldError{}
	case errors.Is(err, lock.ErrNotHeld):
		return fmt.Errorf("%w: %v", driver.ErrNotHeld, err)
	case errors.Is(err, lock.ErrInvalid):
		return fmt.Errorf("%w: %v", driver.ErrInvalid, err)
	}
	return err
}
