package etcd

import (
	"context"
	"time"
)

// A key's counter is attached to a lease, so that a key used once leaves
// nothing on etcd for ever: the counter goes counterTTL after the last
// grant that wrote it, at the least counterTTL − counterLeaseAge. Tokens
// are on the clock's scale (max(counter + 1, the clock in µs)), so a
// counter that old is far behind every clock, and the grant after it
// still gives a higher token unless its client's clock is behind by
// days (as with Redis's 7-day counters). Each Locker attaches the
// counters it writes to one lease of its own, made at the first grant
// and again once it is counterLeaseAge old; the lease is not revoked at
// Close (the counters outlive the Locker). While it has no key attached
// a user with read rights only may revoke it (etcd checks a revoke
// against the keys attached): the grant then fails for want of a lease,
// as when its own lease was revoked, and is made again on new leases.
const (
	counterTTL      = 7 * 24 * time.Hour
	counterLeaseAge = 24 * time.Hour
)

// counterLease returns the Locker's lease for counters, making it when
// there is none or it is counterLeaseAge old (one grant at a time: a
// second would be left without a key for a week).
func (d *etcdDriver) counterLease(ctx context.Context, c *conn) (int64, error) {
	d.clmu.Lock()
	defer d.clmu.Unlock()
	if d.cl != 0 && time.Since(d.clMade) < counterLeaseAge {
		return d.cl, nil
	}
	id, err := c.Grant(ctx, int64(counterTTL/time.Second))
	if err != nil {
		return 0, err
	}
	d.cl, d.clMade = id, time.Now()
	return id, nil
}

// dropCounterLease forgets the counter lease id, which etcd said is
// gone: the next grant makes another.
func (d *etcdDriver) dropCounterLease(id int64) {
	d.clmu.Lock()
	if d.cl == id {
		d.cl = 0
	}
	d.clmu.Unlock()
}
