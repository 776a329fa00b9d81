package etcd

import (
	"context"
	"slices"
	"time"
)

// A released grant's lease is kept, with no key attached, for the next
// grant of its TTL in seconds (a spare), so that an uncontended cycle
// makes no LeaseGrant and no LeaseRevoke. A lease's expiry is known
// from below: it lasts sec seconds from when its grant's request (or a
// renewal's) was sent, the "expires" kept with it. A grant on a spare
// reports as validity what is left of it when taken (at least
// spareLeft of its TTL), never more: lock counts that from the start of
// its call, which came before. Only a lease whose every write had a
// definite reply is kept: one whose write's outcome is unknown may still
// have the write land, and is revoked as before. Any user may revoke a
// spare (it has no key attached): the grant's write then fails for want
// of its lease, and is made again on a new one, as for a fresh lease
// revoked before its write.
const (
	spareLeft = 0.75 // the least part of its TTL a spare has left when taken
	maxSpares = 8    // spares kept per TTL; more are revoked
	maxKept   = 4096 // granted leases remembered for their release
)

type spare struct {
	id      int64
	sec     int64
	expires time.Time
}

// taken is a lease taken for a grant: a spare, or one made for it.
type taken struct {
	id      int64
	sec     int64
	expires time.Time // it lasts until then at the least; zero: unknown
	spare   bool
}

// validity is what a grant on t reports: a lease made within the call
// lasts its TTL from the call's start; a spare what is left of it now.
func (t taken) validity(ttl time.Duration) time.Duration {
	if !t.spare {
		return ttl
	}
	return min(ttl, time.Until(t.expires))
}

// takeSpare returns a spare of sec seconds with at least spareLeft of
// it left (id 0 when there is none), recorded as the attempt's
// (pending), as a lease made for it is.
func (d *etcdDriver) takeSpare(owner string, sec int64) taken {
	d.mu.Lock()
	defer d.mu.Unlock()
	for s := d.spares[sec]; len(s) > 0; s = d.spares[sec] {
		sp := s[len(s)-1]
		d.spares[sec] = s[:len(s)-1]
		if fresh(sp.expires, sec) {
			d.pending[owner] = append(d.pending[owner], sp.id)
			return taken{id: sp.id, sec: sec, expires: sp.expires, spare: true}
		} // else left to expire: it has no key
	}
	return taken{}
}

func fresh(expires time.Time, sec int64) bool {
	return time.Until(expires) >= time.Duration(float64(sec)*spareLeft*float64(time.Second))
}

// takeLease returns a spare of sec seconds, or makes a lease (see
// grantLease).
func (d *etcdDriver) takeLease(ctx context.Context, c *conn, owner string, sec int64) (taken, error) {
	if t := d.takeSpare(owner, sec); t.id != 0 {
		return t, nil
	}
	sent := time.Now()
	id, err := d.grantLease(ctx, c, owner, sec)
	if err != nil {
		return taken{}, err
	}
	return taken{id: id, sec: sec, expires: sent.Add(time.Duration(sec) * time.Second)}, nil
}

// putBack returns t, which no write of owner's attempt attached a key
// to (every write on it had a definite reply), to the spares.
func (d *etcdDriver) putBack(owner string, t taken) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.pending[owner]; len(p) > 0 {
		d.pending[owner] = slices.DeleteFunc(p, func(id int64) bool { return id == t.id })
	}
	if d.closed || !fresh(t.expires, t.sec) || len(d.spares[t.sec]) >= maxSpares {
		return // left to expire: it has no key
	}
	d.spares[t.sec] = append(d.spares[t.sec], spare{id: t.id, sec: t.sec, expires: t.expires})
}

// keep remembers that t lasts until t.expires at the least: a grant was
// made on it, and its release may make it a spare.
func (d *etcdDriver) keep(t taken) {
	if t.expires.IsZero() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.kept) >= maxKept {
		for id, k := range d.kept {
			if time.Now().After(k.expires) {
				delete(d.kept, id)
			}
		}
		if len(d.kept) >= maxKept {
			return
		}
	}
	d.kept[t.id] = spare{id: t.id, sec: t.sec, expires: t.expires}
}

// reuse makes lease, whose key its release deleted, a spare, if a grant
// was made on it with its expiry known, it is fresh enough, and there is
// room; false when the caller is to revoke it.
func (d *etcdDriver) reuse(lease int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	k, ok := d.kept[lease]
	delete(d.kept, lease)
	if !ok || d.closed || !fresh(k.expires, k.sec) || len(d.spares[k.sec]) >= maxSpares {
		return false
	}
	d.spares[k.sec] = append(d.spares[k.sec], k)
	return true
}

// forget drops lease from the leases kept for reuse (its grant ended
// otherwise than by a release that deleted its key on it).
func (d *etcdDriver) forget(lease int64) {
	d.mu.Lock()
	delete(d.kept, lease)
	d.mu.Unlock()
}

// dropSpares revokes every spare (at Close), within a bound.
func (d *etcdDriver) dropSpares(c *conn) {
	d.mu.Lock()
	var ids []int64
	for sec, s := range d.spares {
		for _, sp := range s {
			ids = append(ids, sp.id)
		}
		delete(d.spares, sec)
	}
	d.mu.Unlock()
	if len(ids) == 0 || c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	revoke(ctx, c, ids...)
}
